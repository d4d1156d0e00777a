from nodus.cli import run

run()
