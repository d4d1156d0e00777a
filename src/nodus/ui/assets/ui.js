// nodus ui: the page's only script. It never builds HTML from data: the live part of a page is
// HTML the server rendered (and escaped), fetched again every 2 s while it can change, and a
// followed program output is appended as text nodes (textContent), never parsed as HTML.
(function () {
  "use strict";
  var POLL_MS = 2000;

  // Keep what the reader opened, and the outputs being followed, across a refresh.
  function carryOver(fresh) {
    fresh.querySelectorAll("[id]").forEach(function (node) {
      var old = document.getElementById(node.id);
      if (old && node.matches("details.output")) {
        node.replaceWith(old);
      } else if (old && node.matches("details")) {
        node.open = old.open;  // a section the reader opened or closed stays so
      }
    });
  }

  function refreshLive() {
    var live = document.getElementById("live");
    if (!live || !live.dataset.live) return;
    var timer = setInterval(function () {
      if (document.hidden) return;
      fetch(live.dataset.live, { credentials: "same-origin" }).then(function (answer) {
        if (!answer.ok) return null;
        if (answer.headers.get("X-Nodus-Changing") === "0") clearInterval(timer);
        return answer.text();
      }).then(function (text) {
        if (text === null || text === undefined) return;
        var parsed = new DOMParser().parseFromString(text, "text/html");
        var fresh = document.createElement("div");
        fresh.append.apply(fresh, Array.prototype.slice.call(parsed.body.childNodes));
        carryOver(fresh);
        live.replaceChildren.apply(live, Array.prototype.slice.call(fresh.childNodes));
        startFollowing();
        showEvents();
      }).catch(function () { /* the server stopped: try again at the next tick */ });
    }, POLL_MS);
  }

  function follow(pre) {
    pre.dataset.following = "1";
    function step() {
      var url = new URL(pre.dataset.follow, window.location.href);
      fetch(url, { credentials: "same-origin" }).then(function (answer) {
        return answer.ok ? answer.json() : null;
      }).then(function (piece) {
        if (!piece) return;
        if (piece.lines.length) {
          pre.appendChild(document.createTextNode(piece.lines.join("\n") + "\n"));
        }
        url.searchParams.set("offset", String(piece.next_offset));
        pre.dataset.follow = url.pathname + url.search;
        if (piece.running || piece.lines.length) setTimeout(step, POLL_MS);
      }).catch(function () { setTimeout(step, POLL_MS); });
    }
    setTimeout(step, POLL_MS);
  }

  function startFollowing() {
    document.querySelectorAll("pre.log[data-follow]").forEach(function (pre) {
      if (!pre.dataset.following) follow(pre);
    });
  }

  // A run's events: the types the reader unticked stay hidden, and a collapsed group (the
  // retention deletions) stays as the reader left it, across refreshes of the live part.
  var hiddenTypes = {};
  var openGroups = {};

  function showEvents() {
    document.querySelectorAll("input[data-event-type]").forEach(function (box) {
      box.checked = !hiddenTypes[box.dataset.eventType];
    });
    document.querySelectorAll("tr.event, tr.event-group").forEach(function (row) {
      var grouped = row.classList.contains("grouped");
      row.hidden = Boolean(hiddenTypes[row.dataset.type]) ||
        (grouped && !openGroups[row.dataset.group]);
    });
    document.querySelectorAll("tr.event-group button.expand").forEach(function (button) {
      var open = Boolean(openGroups[button.closest("tr").dataset.group]);
      button.setAttribute("aria-expanded", open ? "true" : "false");
    });
  }

  function onEventControls(event) {
    var target = event.target;
    if (target.matches("input[data-event-type]")) {
      hiddenTypes[target.dataset.eventType] = !target.checked;
    } else if (target.matches("button[data-events]")) {
      document.querySelectorAll("input[data-event-type]").forEach(function (box) {
        hiddenTypes[box.dataset.eventType] = target.dataset.events === "none";
      });
    } else if (target.matches("tr.event-group button.expand")) {
      var group = target.closest("tr").dataset.group;
      openGroups[group] = !openGroups[group];
    } else {
      return;
    }
    showEvents();
  }

  document.addEventListener("DOMContentLoaded", function () {
    refreshLive();
    startFollowing();
    document.addEventListener("change", onEventControls);
    document.addEventListener("click", onEventControls);
    showEvents();
  });
})();
