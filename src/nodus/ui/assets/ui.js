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

// Charts and lists: a value on hover, the chart controls applied at once, columns that sort.
// Like the rest, it reads what the server drew and writes only text (textContent).
(function () {
  "use strict";
  var NEAR = 6; // viewBox units: the points of other lines shown beside the nearest one

  function svgX(svg, event) {
    var point = svg.createSVGPoint();
    point.x = event.clientX;
    point.y = event.clientY;
    return point.matrixTransform(svg.getScreenCTM().inverse()).x;
  }

  function nearest(circles, x) {
    var best = null, gap = Infinity;
    circles.forEach(function (c) {
      var d = Math.abs(c.cx.baseVal.value - x);
      if (d < gap) { gap = d; best = c; }
    });
    return best;
  }

  function showValues(svg, event) {
    var figure = svg.closest("figure.chart");
    var box = figure.querySelector("div.hover");
    var x = svgX(svg, event);
    var first = nearest(svg.querySelectorAll("circle.pt"), x);
    if (!first || !box) return;
    svg.querySelectorAll("circle.near").forEach(function (c) { c.classList.remove("near"); });
    var lines = [first.dataset.at];
    svg.querySelectorAll("g.series").forEach(function (series) {
      var c = nearest(series.querySelectorAll("circle.pt"), first.cx.baseVal.value);
      if (c && Math.abs(c.cx.baseVal.value - first.cx.baseVal.value) <= NEAR) {
        c.classList.add("near");
        lines.push(c.dataset.value);
      }
    });
    box.textContent = lines.join("\n");
    box.hidden = false;
    var frame = figure.getBoundingClientRect();
    var left = event.clientX - frame.left + 14;
    box.style.left = Math.min(left, Math.max(frame.width - box.offsetWidth - 4, 0)) + "px";
    box.style.top = (event.clientY - frame.top + 14) + "px";
  }

  function hideValues(svg) {
    var box = svg.closest("figure.chart").querySelector("div.hover");
    if (box) box.hidden = true;
    svg.querySelectorAll("circle.near").forEach(function (c) { c.classList.remove("near"); });
  }

  // Sorting: the column and direction last asked for, applied again after a live refresh.
  var sorted = null; // {column, descending}

  function sortKey(row, column) {
    var cell = row.cells[column];
    if (!cell) return "";
    return cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
  }

  function compare(a, b) {
    var empty = function (v) { return v === "" || v === "–"; };
    if (empty(a) || empty(b)) return empty(a) - empty(b); // the empty ones last, either way
    var na = Number(a), nb = Number(b);
    if (!isNaN(na) && !isNaN(nb)) return na - nb;
    return a.localeCompare(b, undefined, { numeric: true });
  }

  function applySort(table) {
    if (!sorted || !table.tBodies.length) return;
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (r1, r2) {
      var a = sortKey(r1, sorted.column), b = sortKey(r2, sorted.column);
      var order = compare(a, b);
      var emptyFirst = a === "" || a === "–" || b === "" || b === "–";
      return sorted.descending && !emptyFirst ? -order : order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, index) {
      th.setAttribute("aria-sort", index === sorted.column
        ? (sorted.descending ? "descending" : "ascending") : "none");
    });
  }

  document.addEventListener("click", function (event) {
    var th = event.target.closest && event.target.closest("table.sortable thead th");
    if (!th) return;
    var column = th.cellIndex;
    var again = sorted && sorted.column === column;
    sorted = { column: column, descending: again ? !sorted.descending : false };
    applySort(th.closest("table"));
  });

  document.addEventListener("change", function (event) {
    var form = event.target.closest && event.target.closest("form.chart-controls");
    if (form && event.target.tagName === "SELECT") form.requestSubmit();
  });

  document.addEventListener("mousemove", function (event) {
    var svg = event.target.closest && event.target.closest("figure.chart svg.curves");
    if (svg) showValues(svg, event);
  });

  document.addEventListener("mouseout", function (event) {
    var svg = event.target.closest && event.target.closest("figure.chart svg.curves");
    if (svg && !svg.contains(event.relatedTarget)) hideValues(svg);
  });

  // A running run's metrics page is refreshed every 2 s: the chart choices being typed or
  // picked are kept (the old form put back, and its focus) rather than reset under the reader.
  var focused = null;
  document.addEventListener("focusin", function (event) {
    focused = event.target.closest && event.target.closest("form.chart-controls")
      ? event.target : null;
  });

  function keepControls(mutations) {
    mutations.forEach(function (mutation) {
      Array.prototype.forEach.call(mutation.removedNodes, function (node) {
        var fresh = document.querySelector("#live form.chart-controls");
        var mine = node.dataset && node.dataset.dropped; // the form put aside here: not again
        if (!mine && node.matches && node.matches("form.chart-controls") && fresh) {
          fresh.dataset.dropped = "1";
          fresh.replaceWith(node);
          if (focused && node.contains(focused)) focused.focus();
        }
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var live = document.getElementById("live");
    if (!live) return;
    new MutationObserver(function (mutations) {
      keepControls(mutations);
      live.querySelectorAll("table.sortable").forEach(applySort);
    }).observe(live, { childList: true });
  });
})();
