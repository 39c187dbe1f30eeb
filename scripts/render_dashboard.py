#!/usr/bin/env python3
# Pinned for the tests' virtual environment (current on PyPI; both need Python >= 3.11):
#   matplotlib==3.11.2 numpy==2.4.6
"""Render the panels of a Grafana dashboard, with data from a real Prometheus, into one PNG.

So that docs/ can show what a dashboard shows for a real run without a Grafana server. The script
reads a dashboard in Grafana's JSON model (`panels`; row panels, whose `panels` hold their children
while collapsed; the legacy `rows`; an API export's {"dashboard": {...}} wrapper), substitutes the
template variables, runs every target's PromQL against Prometheus's HTTP API and draws each panel
with matplotlib where its gridPos puts it on Grafana's 24-column grid, with the row titles as
section headers (collapsed rows are drawn expanded).

Usage:
  render_dashboard.py --prometheus http://127.0.0.1:9090 \\
      --dashboard charts/cohort/dashboards/cohort-job.json \\
      --var namespace=default --var job=mon [--var NAME=VALUE ...] \\
      [--start UNIX] [--end UNIX] [--step SECONDS] --out job.png [--title TEXT]

  --start/--end  unix seconds; default the last 10 minutes.
  --step         range-query resolution; default max(scrape interval, (end - start) / 250).
  --var          a template variable; variables not given take the dashboard's current value.
                 Built-ins: $__interval (the step), $__rate_interval (max(4 * step,
                 4 * scrape interval, 15s)), $__range, $__range_s, $__range_ms, $__from, $__to.
                 `$v`, `${v}`, `${v:fmt}` and `[[v]]` are substituted; data source variables
                 (${datasource}) are ignored.
  --scrape-interval  for $__rate_interval and the default step; default: the smallest
                 scrape_interval in Prometheus's own configuration (/api/v1/status/config).

Panels: timeseries/graph (lines, bars or points, legends from legendFormat) and state-timeline
(coloured bands, value mappings) from /api/v1/query_range; stat (big numbers, thresholds colours,
units), bargauge/gauge (horizontal bars), table (a text table; merge and organize transformations)
from /api/v1/query at --end. A panel without data shows "No data", one whose query failed shows the
error. Time axes read m:ss since --start (--time-axis clock: HH:MM:SS UTC). stderr gets one line per
panel: "TITLE: N series" or "TITLE: no data", plus "; query error (REFID): MESSAGE" per failed query.

Requirements: Python 3.9+ with matplotlib and numpy (HTTP uses the standard library); the pinned
versions above need Python 3.11+. The monitoring end-to-end test (tests/e2e/monitoring_e2e_test.cc)
makes build/python/render-matplotlib-3.11.2 with them and draws the job dashboard of its run into
build/monitoring/cohort-job-dashboard.png (the picture in docs/observability.md).
By hand: python3 -m venv /tmp/render-venv &&
  /tmp/render-venv/bin/pip install matplotlib==3.11.2 numpy==2.4.6

Exit status: 0 the PNG was written (failed queries are drawn in their panels and listed on stderr);
1 a real error, named on stderr with its fix: Prometheus unreachable or not a Prometheus, the
dashboard unreadable, matplotlib missing, the PNG unwritable, a panel the script failed to draw;
2 bad arguments; 3 with --strict, when any panel's query failed.
"""

import argparse
import concurrent.futures
import datetime
import json
import math
import os
import re
import sys
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request

PINNED = "matplotlib==3.11.2 numpy==2.4.6"
RANGE_TYPES = {"timeseries", "graph", "state-timeline", "status-history", "trend"}
INSTANT_TYPES = {"stat", "singlestat", "gauge", "bargauge", "table", "table-old", "piechart",
                 "barchart"}

# Grafana's named colours and its classic series palette.
GRAFANA_COLORS = {
    "green": "#73BF69", "dark-green": "#37872D", "semi-dark-green": "#56A64B",
    "light-green": "#96D98D", "super-light-green": "#C8F2C2",
    "red": "#F2495C", "dark-red": "#C4162A", "semi-dark-red": "#E02F44",
    "light-red": "#FF7383", "super-light-red": "#FFA6B0",
    "yellow": "#FADE2A", "dark-yellow": "#E0B400", "semi-dark-yellow": "#F2CC0C",
    "light-yellow": "#FFEE52", "super-light-yellow": "#FFF899",
    "orange": "#FF9830", "dark-orange": "#FA6400", "semi-dark-orange": "#FF780A",
    "light-orange": "#FFB357", "super-light-orange": "#FFCB7D",
    "blue": "#5794F2", "dark-blue": "#1F60C4", "semi-dark-blue": "#3274D9",
    "light-blue": "#8AB8FF", "super-light-blue": "#C0D8FF",
    "purple": "#B877D9", "dark-purple": "#8F3BB8", "semi-dark-purple": "#A352CC",
    "light-purple": "#CA95E5", "super-light-purple": "#DEB6F2",
    "text": "#3d434b", "white": "#ffffff", "black": "#000000",
}
PALETTE = ["#7EB26D", "#EAB839", "#6ED0E0", "#EF843C", "#E24D42", "#1F78C1", "#BA43A9",
           "#705DA0", "#508642", "#CCA300", "#447EBC", "#C15C17", "#890F02", "#0A437C",
           "#6D1F62", "#584477"]
TEXT = "#24292f"
MUTED = "#6b7280"


class Fatal(Exception):
    """A real error: the message names the cause and the fix; exit 1."""


class QueryError(Exception):
    """Prometheus rejected one query (bad PromQL, execution error): shown in its panel."""


# ---------------------------------------------------------------------------------------------
# Small helpers


def parse_duration(text):
    """'15s', '1m30s', '500ms', '2h', '1d', '>10s', '30' -> seconds (float); None if unparsable."""
    if text is None:
        return None
    text = str(text).strip().lstrip(">").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * units[u] for n, u in parts)


def prom_duration(seconds):
    """Seconds -> a PromQL duration: whole seconds ('15s'), milliseconds below 1 s."""
    if seconds < 1:
        return "%dms" % max(1, int(round(seconds * 1000)))
    return "%ds" % int(math.ceil(seconds - 1e-9))


def natural_key(text):
    return [int(p) if p.isdigit() else p.lower() for p in re.split(r"(\d+)", str(text))]


def color_of(name, default=TEXT):
    """A Grafana colour (named, #hex, rgb(), rgba()) -> something matplotlib accepts."""
    if not name:
        return default
    name = str(name).strip()
    if name in GRAFANA_COLORS:
        return GRAFANA_COLORS[name]
    m = re.match(r"rgba?\(([^)]*)\)", name)
    if m:
        nums = [float(x) for x in m.group(1).split(",")]
        rgb = [min(max(v / 255.0, 0), 1) for v in nums[:3]]
        return tuple(rgb + [nums[3] if len(nums) > 3 else 1.0])
    if name == "transparent":
        return (1, 1, 1, 0)
    try:
        import matplotlib.colors as mcolors
        mcolors.to_rgba(name)
        return name
    except (ValueError, ImportError):
        return default


def is_dark(color):
    import matplotlib.colors as mcolors
    try:
        r, g, b, _ = mcolors.to_rgba(color)
    except ValueError:
        return False
    return 0.299 * r + 0.587 * g + 0.114 * b < 0.6


def fit(text, width_in, fontsize):
    """Truncate text to about what fits in width_in inches at fontsize points."""
    chars = max(3, int(width_in * 72 / (0.58 * fontsize)))
    return text if len(text) <= chars else text[:chars - 1] + "\u2026"


# ---------------------------------------------------------------------------------------------
# Units and value formatting (a practical subset of Grafana's)

TIME_SCALES = [(1e-6, "\u00b5s"), (1e-3, "ms"), (1, "s"), (60, "min"), (3600, "h"), (86400, "d")]
RATE_SUFFIX = {"ops": " ops/s", "reqps": " req/s", "rps": " reads/s", "wps": " writes/s",
               "iops": " io/s", "cps": " c/s", "opm": " ops/min", "rpm": " req/min"}


def trim_number(v, decimals=None):
    if decimals is not None:
        return "%.*f" % (int(decimals), v)
    a = abs(v)
    if a == 0:
        return "0"
    if float(v).is_integer() and a < 1e15:
        return "%d" % v
    if a >= 100:
        s = "%.0f" % v
    elif a >= 10:
        s = "%.1f" % v
    elif a >= 1:
        s = "%.2f" % v
    else:
        s = "%.3g" % v
        if "e" in s:
            return s
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s


def fmt_value(v, unit, decimals=None):
    """One value as Grafana would print it in a stat, bar or table cell."""
    if v is None:
        return "null"
    if isinstance(v, str):
        return v
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    unit = (unit or "").strip()
    if unit in ("s", "ms", "\u00b5s", "us", "ns", "m", "h", "d"):
        secs = v * {"s": 1, "ms": 1e-3, "\u00b5s": 1e-6, "us": 1e-6, "ns": 1e-9, "m": 60,
                    "h": 3600, "d": 86400}[unit]
        scale, suffix = TIME_SCALES[0]
        for s, name in TIME_SCALES:
            if abs(secs) >= s:
                scale, suffix = s, name
        if secs == 0:
            scale, suffix = 1, "s"
        return "%s %s" % (trim_number(secs / scale, decimals), suffix)
    if unit == "percentunit":
        return trim_number(v * 100, decimals) + "%"
    if unit == "percent":
        return trim_number(v, decimals) + "%"
    if unit in RATE_SUFFIX:
        return trim_number(v, decimals) + RATE_SUFFIX[unit]
    if unit in ("bytes", "decbytes", "bits", "decbits"):
        base = 1024 if unit in ("bytes", "bits") else 1000
        names = ["B", "KiB", "MiB", "GiB", "TiB"] if base == 1024 else ["B", "kB", "MB", "GB", "TB"]
        if unit.endswith("bits"):
            names = [n.replace("B", "b") for n in names]
        i = 0
        while abs(v) >= base and i < len(names) - 1:
            v /= base
            i += 1
        return "%s %s" % (trim_number(v, decimals), names[i])
    if unit == "short":
        for scale, suffix in ((1e12, " T"), (1e9, " B"), (1e6, " M"), (1e3, " K")):
            if abs(v) >= scale:
                return trim_number(v / scale, decimals) + suffix
        return trim_number(v, decimals)
    if unit.startswith("suffix:"):
        return trim_number(v, decimals) + unit[len("suffix:"):]
    if unit.startswith("prefix:"):
        return unit[len("prefix:"):] + trim_number(v, decimals)
    if unit in ("", "none", "string", "locale", "dateTimeAsIso", "dateTimeFromNow"):
        return trim_number(v, decimals)
    return "%s %s" % (trim_number(v, decimals), unit)


def axis_scale(unit, maxabs):
    """(divisor, suffix) for an axis whose largest tick is maxabs."""
    unit = (unit or "").strip()
    if unit in ("s", "ms", "\u00b5s", "us"):
        base = {"s": 1, "ms": 1e-3, "\u00b5s": 1e-6, "us": 1e-6}[unit]
        secs = maxabs * base
        if secs == 0:
            return 1, " " + unit
        if secs < 1e-3:
            scale, suffix = 1e-6, " \u00b5s"
        elif secs < 1:
            scale, suffix = 1e-3, " ms"
        elif secs < 3600:
            scale, suffix = 1, " s"
        elif secs < 3 * 86400:
            scale, suffix = 3600, " h"
        else:
            scale, suffix = 86400, " d"
        return scale / base, suffix
    if unit == "percentunit":
        return 0.01, "%"
    if unit == "percent":
        return 1, "%"
    if unit in RATE_SUFFIX:
        return 1, "/s" if unit not in ("opm", "rpm") else "/min"
    if unit in ("bytes", "decbytes"):
        base = 1024 if unit == "bytes" else 1000
        names = ["B", "KiB", "MiB", "GiB", "TiB"] if base == 1024 else ["B", "kB", "MB", "GB", "TB"]
        i = 0
        while maxabs >= base ** (i + 1) and i < len(names) - 1:
            i += 1
        return base ** i, " " + names[i]
    if unit.startswith("suffix:"):
        return 1, unit[len("suffix:"):]
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if maxabs >= scale * 10 or (unit == "short" and maxabs >= scale):
            return scale, suffix
    return 1, ""


def make_axis_formatter(unit):
    from matplotlib.ticker import Formatter

    class UnitFormatter(Formatter):
        def __init__(self):
            self.scale, self.suffix, self.decimals = 1, "", 0

        def set_locs(self, locs):
            self._ticks = list(locs)
            finite = [abs(x) for x in self._ticks if math.isfinite(x)]
            self.scale, self.suffix = axis_scale(unit, max(finite) if finite else 0)
            scaled = [x / self.scale for x in self._ticks if math.isfinite(x)]
            big = max([abs(x) for x in scaled] + [1e-12])
            self.decimals = next((d for d in range(5) if all(
                abs(round(x, d) - x) <= 1e-6 * big for x in scaled)), 4)

        def __call__(self, x, pos=None):
            text = "%.*f" % (self.decimals, x / self.scale)
            if text.startswith("-") and float(text) == 0:
                text = text[1:]
            return text + self.suffix

    return UnitFormatter()


# ---------------------------------------------------------------------------------------------
# Value mappings and thresholds


def apply_mappings(value, mappings):
    """-> (text or None, colour or None) from Grafana value mappings (new and legacy forms)."""
    for m in mappings or []:
        mtype = m.get("type")
        opts = m.get("options") or {}
        if mtype == "value":
            for key, result in opts.items():
                try:
                    if value is not None and not math.isnan(value) and float(key) == value:
                        return result.get("text"), result.get("color")
                except (TypeError, ValueError):
                    if str(key) == str(value):
                        return result.get("text"), result.get("color")
        elif mtype == "range":
            lo, hi = opts.get("from"), opts.get("to")
            if value is not None and not math.isnan(value) and \
                    (lo is None or value >= lo) and (hi is None or value <= hi):
                result = opts.get("result") or {}
                return result.get("text"), result.get("color")
        elif mtype == "special":
            match = opts.get("match")
            hit = (value is None and match in ("null", "null+nan", "empty")) or \
                (value is not None and math.isnan(value) and match in ("nan", "null+nan")) or \
                (value == 1 and match == "true") or (value == 0 and match == "false")
            if hit:
                result = opts.get("result") or {}
                return result.get("text"), result.get("color")
        elif mtype == "regex":
            try:
                if re.search(opts.get("pattern", ""), str(value)):
                    result = opts.get("result") or {}
                    return result.get("text"), result.get("color")
            except re.error:
                pass
        elif mtype in (1, "1") and value is not None:  # legacy value->text
            try:
                if float(m.get("value")) == value:
                    return m.get("text"), None
            except (TypeError, ValueError):
                pass
        elif mtype in (2, "2") and value is not None:  # legacy range->text
            try:
                if float(m.get("from")) <= value <= float(m.get("to")):
                    return m.get("text"), None
            except (TypeError, ValueError):
                pass
    return None, None


DEFAULT_THRESHOLDS = [{"color": "green", "value": None}, {"color": "red", "value": 80}]


def threshold_color(value, defaults):
    steps = ((defaults.get("thresholds") or {}).get("steps")) or DEFAULT_THRESHOLDS
    color = steps[0].get("color")
    if value is not None and not math.isnan(value):
        for step in steps[1:]:
            if step.get("value") is not None and value >= step["value"]:
                color = step.get("color")
    return color_of(color)


def fixed_color(defaults):
    c = defaults.get("color") or {}
    if c.get("mode") == "fixed" and c.get("fixedColor"):
        return color_of(c["fixedColor"])
    return None


# ---------------------------------------------------------------------------------------------
# Prometheus client (urllib only)


class Prometheus:
    def __init__(self, base, timeout):
        self.base = base.rstrip("/")
        self.timeout = timeout

    def call(self, path, params=None, post=False):
        url = self.base + path
        data = None
        if params and post:
            data = urllib.parse.urlencode(params).encode()
        elif params:
            url += "?" + urllib.parse.urlencode(params)
        req = urllib.request.Request(url, data=data)
        if data is not None:
            req.add_header("Content-Type", "application/x-www-form-urlencoded")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                body = resp.read()
        except urllib.error.HTTPError as e:
            body = e.read()
            try:
                doc = json.loads(body)
            except ValueError:
                doc = None
            if isinstance(doc, dict) and doc.get("status") == "error" and e.code in (400, 422):
                raise QueryError("%s: %s" % (doc.get("errorType", "error"), doc.get("error", "")))
            hint = " (Prometheus is starting or overloaded; wait until /-/ready answers 200)" \
                if e.code == 503 else ""
            raise Fatal("Prometheus at %s answered %s to %s: HTTP %d %s%s. Check that "
                        "--prometheus is the base URL of Prometheus's HTTP API, e.g. "
                        "http://127.0.0.1:9090." % (self.base, "POST" if post else "GET", path,
                                                    e.code, body[:200].decode("utf-8", "replace").strip(),
                                                    hint))
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise Fatal("cannot reach Prometheus at %s (%s): is it running, and is --prometheus "
                        "its address (e.g. http://127.0.0.1:9090)?" % (self.base, reason))
        try:
            doc = json.loads(body)
        except ValueError:
            raise Fatal("%s%s did not answer with JSON: --prometheus must be the base URL of a "
                        "Prometheus HTTP API (e.g. http://127.0.0.1:9090), not a web page or "
                        "another service." % (self.base, path))
        if not isinstance(doc, dict) or doc.get("status") != "success":
            raise QueryError(str(doc.get("error") if isinstance(doc, dict) else doc))
        return doc.get("data")

    def scrape_interval(self):
        """Smallest scrape_interval in Prometheus's loaded configuration, or None."""
        try:
            data = self.call("/api/v1/status/config")
        except (QueryError, Fatal):
            return None
        values = [parse_duration(v) for v in
                  re.findall(r"scrape_interval:\s*['\"]?([0-9a-z.]+)", (data or {}).get("yaml", ""))]
        values = [v for v in values if v]
        return min(values) if values else None

    def query(self, expr, at):
        return self.call("/api/v1/query", {"query": expr, "time": "%.3f" % at}, post=True)

    def query_range(self, expr, start, end, step):
        return self.call("/api/v1/query_range",
                         {"query": expr, "start": "%.3f" % start, "end": "%.3f" % end,
                          "step": "%g" % step}, post=True)


def to_float(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")


def series_from(data):
    """Prometheus query data -> [(labels, [(t, v), ...])]."""
    if not data:
        return []
    rtype, result = data.get("resultType"), data.get("result")
    if rtype == "matrix":
        return [(r.get("metric") or {}, [(float(t), to_float(v)) for t, v in r.get("values") or []])
                for r in result or []]
    if rtype == "vector":
        return [(r.get("metric") or {}, [(float(r["value"][0]), to_float(r["value"][1]))])
                for r in result or [] if "value" in r]
    if rtype == "scalar" and result:
        return [({}, [(float(result[0]), to_float(result[1]))])]
    if rtype == "string" and result:
        return [({}, [(float(result[0]), result[1])])]
    return []


# ---------------------------------------------------------------------------------------------
# Dashboard model: panels, rows, layout


def load_dashboard(path):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise Fatal("cannot read the dashboard %s: %s. Pass --dashboard the path of a Grafana "
                    "dashboard JSON file." % (path, e.strerror or e))
    except ValueError as e:
        raise Fatal("the dashboard %s is not valid JSON (%s); fix the file (python3 -m json.tool "
                    "%s shows where)." % (path, e, path))
    if isinstance(doc, dict) and "dashboard" in doc and "panels" not in doc and "rows" not in doc:
        doc = doc["dashboard"]
    if not isinstance(doc, dict) or not (isinstance(doc.get("panels"), list) or
                                         isinstance(doc.get("rows"), list)):
        raise Fatal("%s is not a Grafana dashboard: it has neither a `panels` nor a `rows` list."
                    % path)
    return doc


def flatten(doc):
    """-> [("row", title) | ("panel", panel)] in dashboard order, collapsed rows expanded."""
    items = []

    def walk(panels):
        for p in panels:
            if not isinstance(p, dict):
                continue
            if p.get("type") == "row":
                items.append(("row", p.get("title") or ""))
                walk(p.get("panels") or [])
            else:
                items.append(("panel", p))

    if isinstance(doc.get("panels"), list):
        walk(doc["panels"])
    for row in doc.get("rows") or []:  # legacy schema: rows of panels with `span` (of 12)
        if not isinstance(row, dict):
            continue
        if row.get("title") and row.get("showTitle", True):
            items.append(("row", row["title"]))
        height = parse_duration(str(row.get("height", "250px")).replace("px", "")) or 250
        for p in row.get("panels") or []:
            if isinstance(p, dict):
                p = dict(p)
                p.setdefault("_legacy_size", (int(round(float(p.get("span", 12)) * 2)),
                                              max(2, int(round(height / 30.0)))))
                items.append(("panel", p))
    return items


def layout(items):
    """Places items on the 24-column grid: -> [(item, x, y, w, h)], total height (grid units).

    Gravity like Grafana's: each section (the panels under one row header) keeps its panels' x
    and width and packs them upwards, so collapsed rows, whose children carry stale y values,
    land where an expanded dashboard would show them."""
    placed = []
    sky = [0] * 24
    section = []

    def flush():
        if not section:
            return
        if all(isinstance(p.get("gridPos"), dict) for p in section):
            order = sorted(section, key=lambda p: (p["gridPos"].get("y", 0), p["gridPos"].get("x", 0)))
        else:
            order = section
        next_x = 0
        for p in order:
            gp = p.get("gridPos") if isinstance(p.get("gridPos"), dict) else None
            if gp:
                w = int(gp.get("w", 12) or 12)
                h = int(gp.get("h", 8) or 8)
                x = int(gp.get("x", 0) or 0)
            else:
                w, h = p.get("_legacy_size", (12, 8))
                x = next_x if next_x + w <= 24 else 0
            w = max(1, min(24, w))
            x = max(0, min(24 - w, x))
            y = max(sky[x:x + w])
            placed.append((("panel", p), x, y, w, max(1, h)))
            for c in range(x, x + w):
                sky[c] = y + max(1, h)
            next_x = x + w
        section.clear()

    for kind, obj in items:
        if kind == "row":
            flush()
            y = max(sky)
            if obj:
                placed.append((("row", obj), 0, y, 24, 1))
                y += 1
            sky[:] = [y] * 24
        else:
            section.append(obj)
    flush()
    return placed, max(sky)


def template_vars(doc, given):
    """The dashboard's variables (current values) overridden by --var; data sources -> ''."""
    values, ignore = {}, set()
    for v in ((doc.get("templating") or {}).get("list") or []):
        if not isinstance(v, dict) or not v.get("name"):
            continue
        name = v["name"]
        if v.get("type") == "datasource":
            ignore.add(name)
            continue
        cur = (v.get("current") or {}).get("value")
        if v.get("type") == "constant" and cur in (None, ""):
            cur = v.get("query")
        if isinstance(cur, list):
            cur = [c for c in cur if c != "$__all"]
            cur = cur[0] if len(cur) == 1 else ("(" + "|".join(cur) + ")" if cur else None)
        if isinstance(cur, str) and cur and cur != "$__all":
            values[name] = cur
    for inp in doc.get("__inputs") or []:
        if isinstance(inp, dict) and inp.get("type") == "datasource" and inp.get("name"):
            ignore.add(inp["name"])
    values.update(given)
    for name in ignore:
        values.setdefault(name, "")
    return values


VAR_RE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]|\$(\w+)")


def substitute(text, values, missing):
    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in values:
            return values[name]
        if not name[0].isdigit():
            missing.add(name)
        return m.group(0)
    return VAR_RE.sub(repl, text or "")


LEGEND_RE = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")


def series_name(labels, legend, expr):
    if legend and legend != "__auto":
        return LEGEND_RE.sub(lambda m: str(labels.get(m.group(1), "")), legend)
    if labels:
        name = labels.get("__name__", "")
        rest = ", ".join('%s="%s"' % (k, v) for k, v in sorted(labels.items()) if k != "__name__")
        return name + ("{%s}" % rest if rest else "")
    return expr


# ---------------------------------------------------------------------------------------------
# Drawing


class Canvas:
    """Figure geometry: grid units -> figure fractions."""

    def __init__(self, fig, width_in, height_in, top_in, col_in, unit_in, margin_in):
        self.fig, self.W, self.H = fig, width_in, height_in
        self.top, self.col, self.unit, self.margin = top_in, col_in, unit_in, margin_in

    def cell(self, x, y, w, h, gap=0.05):
        """(left, bottom, width, height) in inches of a grid cell, inset by gap."""
        left = self.margin + x * self.col + gap
        top = self.top + y * self.unit + gap
        return left, self.H - top - (h * self.unit - 2 * gap), w * self.col - 2 * gap, \
            h * self.unit - 2 * gap

    def axes(self, left, bottom, width, height, **kw):
        width, height = max(width, 0.05), max(height, 0.05)
        return self.fig.add_axes([left / self.W, bottom / self.H, width / self.W, height / self.H],
                                 **kw)


def panel_frame(cv, box, title):
    from matplotlib.patches import FancyBboxPatch
    left, bottom, width, height = box
    cv.fig.patches.append(FancyBboxPatch(
        (left / cv.W, bottom / cv.H), width / cv.W, height / cv.H,
        boxstyle="round,pad=0,rounding_size=0.004", transform=cv.fig.transFigure,
        facecolor="#fbfbfc", edgecolor="#d5d9df", linewidth=0.8, zorder=-10))
    if title:
        cv.fig.text((left + 0.09) / cv.W, (bottom + height - 0.07) / cv.H, fit(title, width - 0.2, 9.5),
                    fontsize=9.5, fontweight="bold", color=TEXT, ha="left", va="top")


def message(cv, box, text, color=MUTED, top_pad=0.3):
    left, bottom, width, height = box
    ax = cv.axes(left, bottom, width, height - top_pad)
    ax.axis("off")
    lines = textwrap.wrap(text, max(10, int(width * 72 / (0.58 * 8)))) or [""]
    max_lines = max(1, int((height - top_pad) * 72 / 11))
    if len(lines) > max_lines:
        lines = lines[:max_lines - 1] + [lines[max_lines - 1][:-1] + "\u2026"]
    ax.text(0.5, 0.5, "\n".join(lines), ha="center", va="center", fontsize=8 if len(text) > 12 else 11,
            color=color, transform=ax.transAxes)


def legend_plan(names, width_in, max_rows, fontsize=7):
    """-> (ncol, rows, shown): a legend laid out in columns under a plot width_in wide."""
    if not names:
        return 1, 0, 0
    longest = min(max(len(n) for n in names), 60)
    col_w = longest * 0.58 * fontsize / 72 + 0.35
    ncol = max(1, min(len(names), int(width_in / col_w)))
    rows = int(math.ceil(len(names) / float(ncol)))
    if rows <= max_rows:
        return ncol, rows, len(names)
    return ncol, max_rows, max_rows * ncol - 1


def time_axis(ax, ctx, width_in):
    from matplotlib.ticker import FixedLocator, FuncFormatter
    span = ctx.end - ctx.start
    want = max(2, int(width_in / 0.75))
    nice = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200,
            86400, 172800, 604800]
    step = next((n for n in nice if span / n <= want), nice[-1])
    if ctx.clock:
        first = math.ceil(ctx.start / step) * step - ctx.start
    else:
        first = 0
    ticks = [first + i * step for i in range(int((span - first) / step) + 1)]
    ax.xaxis.set_major_locator(FixedLocator(ticks))

    def label(x, pos=None):
        if ctx.clock:
            t = datetime.datetime.fromtimestamp(ctx.start + x, datetime.timezone.utc)
            return t.strftime("%H:%M:%S" if step < 60 else "%H:%M")
        x = int(round(x))
        if span >= 3600:
            return "%d:%02d" % (x // 3600, (x % 3600) // 60)
        return "%d:%02d" % (x // 60, x % 60)

    ax.xaxis.set_major_formatter(FuncFormatter(label))
    ax.set_xlim(0, span)


def style_axes(ax):
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_color("#c3c8cf")
    ax.tick_params(labelsize=7, colors="#4b5563", length=2, pad=1.5)
    ax.set_facecolor("#fbfbfc")


def field_config(panel):
    fc = panel.get("fieldConfig") or {}
    defaults = dict(fc.get("defaults") or {})
    if panel.get("type") == "graph" and not defaults.get("unit"):
        yaxes = panel.get("yaxes") or []
        if yaxes and isinstance(yaxes[0], dict) and yaxes[0].get("format"):
            defaults["unit"] = yaxes[0]["format"]
    if panel.get("type") == "singlestat" and not defaults.get("unit") and panel.get("format"):
        defaults["unit"] = panel["format"]
    return defaults, fc.get("overrides") or []


def override_props(name, refid, overrides):
    props = {}
    for o in overrides:
        matcher = o.get("matcher") or {}
        mid, opt = matcher.get("id"), matcher.get("options")
        hit = (mid == "byName" and opt == name) or \
            (mid == "byFrameRefID" and opt == refid)
        if mid == "byRegexp" and isinstance(opt, str):
            try:
                hit = re.search(opt, name) is not None
            except re.error:
                hit = False
        if hit:
            for prop in o.get("properties") or []:
                props[prop.get("id")] = prop.get("value")
    return props


def draw_timeseries(cv, box, panel, series, ctx):
    import numpy as np
    left, bottom, width, height = box
    defaults, overrides = field_config(panel)
    custom = defaults.get("custom") or {}
    unit = defaults.get("unit")
    legend_opts = (panel.get("options") or {}).get("legend") or {}
    show_legend = legend_opts.get("showLegend", True) and \
        (panel.get("legend") or {}).get("show", True) is not False
    calcs = legend_opts.get("calcs") or []
    step = ctx.step
    legacy = panel.get("type") == "graph"
    draw_style = custom.get("drawStyle") or ("bars" if legacy and panel.get("bars") else "line")
    stacking = ((custom.get("stacking") or {}).get("mode")) or \
        ("normal" if legacy and panel.get("stack") else "none")
    fill = custom.get("fillOpacity", 10 if not legacy else (panel.get("fill", 1) * 10))
    interp = custom.get("lineInterpolation", "linear")
    lw = max(0.6, float(custom.get("lineWidth", 1) or 1)) * 0.9
    span_nulls = custom.get("spanNulls", False)

    # Resolve names, colours, visibility; optional stacking on the shared step grid.
    drawn = []
    for i, s in enumerate(series):
        props = override_props(s["name"], s["refId"], overrides)
        hide = props.get("custom.hideFrom") or {}
        name = props.get("displayName") or s["name"]
        color = props.get("color") or {}
        c = color_of(color.get("fixedColor")) if isinstance(color, dict) and color.get("fixedColor") \
            else fixed_color(defaults) if len(series) == 1 and fixed_color(defaults) \
            else PALETTE[i % len(PALETTE)]
        t = np.array([p[0] for p in s["points"]], dtype=float) - ctx.start
        v = np.array([p[1] if isinstance(p[1], float) else float("nan") for p in s["points"]],
                     dtype=float)
        drawn.append(dict(name=name, color=c, t=t, v=v, viz=not hide.get("viz"),
                          legend=not hide.get("legend")))
    if stacking in ("normal", "percent") and drawn:
        grid = {}
        for d in drawn:
            for tt in d["t"]:
                grid.setdefault(round(tt, 3), len(grid))
        keys = sorted(grid)
        index = {k: i for i, k in enumerate(keys)}
        total = np.zeros(len(keys))
        mats = []
        for d in drawn:
            row = np.full(len(keys), np.nan)
            for tt, vv in zip(d["t"], d["v"]):
                row[index[round(tt, 3)]] = vv
            mats.append(row)
        if stacking == "percent":
            sums = np.nansum(np.array(mats), axis=0)
            sums[sums == 0] = np.nan
            mats = [m / sums for m in mats]
            unit = "percentunit"
        for d, row in zip(drawn, mats):
            base = total.copy()
            total = total + np.nan_to_num(row)
            d["t"], d["v"], d["base"] = np.array(keys), np.where(np.isnan(row), np.nan, total), base

    # Legend space under the plot.
    labels = []
    for d in drawn:
        if not d["legend"]:
            continue
        label = d["name"]
        finite = d["v"][np.isfinite(d["v"])]
        extra = []
        for calc in calcs:
            if not len(finite):
                break
            val = {"lastNotNull": finite[-1], "last": finite[-1], "mean": finite.mean(),
                   "max": finite.max(), "min": finite.min(), "sum": finite.sum(),
                   "firstNotNull": finite[0], "first": finite[0]}.get(calc)
            if val is not None:
                extra.append("%s %s" % (calc.replace("NotNull", ""), fmt_value(float(val), unit)))
        labels.append((d, label + ("  (" + ", ".join(extra) + ")" if extra else "")))
    plot_w = width - 0.62 - 0.15
    max_rows = max(1, min(4, int((height - 1.3) / 0.16)))
    ncol, rows, shown = legend_plan([l for _, l in labels], plot_w, max_rows) if show_legend \
        else (1, 0, 0)
    legend_h = rows * 0.155 + (0.05 if rows else 0)
    ax = cv.axes(left + 0.62, bottom + 0.24 + legend_h, plot_w, height - 0.36 - 0.24 - legend_h)
    style_axes(ax)
    ax.grid(True, color="#e5e7eb", linewidth=0.6)
    ax.set_axisbelow(True)

    all_v = []
    for d in drawn:
        if not d["viz"]:
            continue
        t, v = d["t"], d["v"]
        if not len(t):
            continue
        order = np.argsort(t)
        t, v = t[order], v[order]
        base = d.get("base")
        if base is not None:
            base = base[order]
        if not span_nulls and len(t) > 1:
            gaps = np.where(np.diff(t) > 1.5 * step)[0]
            if len(gaps):
                t = np.insert(t, gaps + 1, t[gaps] + step / 2)
                v = np.insert(v, gaps + 1, np.nan)
                if base is not None:
                    base = np.insert(base, gaps + 1, np.nan)
        finite = np.isfinite(v)
        all_v.extend(v[finite].tolist())
        if draw_style == "bars":
            ax.bar(t[finite], v[finite] - (base[finite] if base is not None else 0),
                   bottom=base[finite] if base is not None else 0, width=step * 0.85,
                   color=d["color"], alpha=max(0.3, fill / 100.0), linewidth=0)
            continue
        if draw_style == "points" or custom.get("showPoints") == "always":
            ax.plot(t, v, "o", markersize=2.2, color=d["color"])
        if draw_style != "points":
            ds = {"stepAfter": "steps-post", "stepBefore": "steps-pre"}.get(interp, "default")
            ax.plot(t, v, color=d["color"], linewidth=lw, drawstyle=ds)
            # Isolated points would be invisible as a line.
            prev_ok = np.concatenate([[False], finite[:-1]])
            next_ok = np.concatenate([finite[1:], [False]])
            lone = finite & ~prev_ok & ~next_ok
            if lone.any():
                ax.plot(t[lone], v[lone], "o", markersize=2.2, color=d["color"])
            if fill and fill > 0:
                ax.fill_between(t, v, base if base is not None else 0, where=finite,
                                color=d["color"], alpha=min(0.5, fill / 100.0), linewidth=0,
                                step={"steps-post": "post", "steps-pre": "pre"}.get(ds))
    tstyle = (custom.get("thresholdsStyle") or {}).get("mode", "off")
    if tstyle and tstyle != "off":
        for s in ((defaults.get("thresholds") or {}).get("steps") or [])[1:]:
            if s.get("value") is not None:
                ax.axhline(s["value"], color=color_of(s.get("color")), linewidth=0.8,
                           linestyle="--" if "dashed" in tstyle or tstyle == "line+area" else "-")
    time_axis(ax, ctx, plot_w)
    # y range: the data with 8% headroom, then the panel's min/max and soft limits.
    dlo, dhi = (min(all_v), max(all_v)) if all_v else (0.0, 1.0)
    pad = (dhi - dlo) * 0.08 or abs(dhi) * 0.1 or 1.0
    lo, hi = dlo - pad, dhi + pad
    if dlo >= 0 and lo < 0:
        lo = 0.0
    if defaults.get("min") is not None:
        lo = defaults["min"]
    elif custom.get("axisSoftMin") is not None and dlo >= custom["axisSoftMin"]:
        lo = custom["axisSoftMin"]
    if defaults.get("max") is not None:
        hi = defaults["max"]
    elif custom.get("axisSoftMax") is not None and dhi <= custom["axisSoftMax"]:
        hi = custom["axisSoftMax"]
    if hi <= lo:
        hi = lo + 1
    ax.set_ylim(lo, hi)
    ax.yaxis.set_major_formatter(make_axis_formatter(unit))
    from matplotlib.ticker import MaxNLocator
    ax.yaxis.set_major_locator(MaxNLocator(nbins=max(2, int(ax.bbox.height / 72 / 0.38)),
                                           steps=[1, 2, 2.5, 5, 10]))
    if rows:
        from matplotlib.lines import Line2D
        handles = [Line2D([], [], color=d["color"], linewidth=2.2) for d, _ in labels[:shown]]
        texts = [fit(l, plot_w / ncol - 0.3, 7) for _, l in labels[:shown]]
        if shown < len(labels):
            handles.append(Line2D([], [], color="none"))
            texts.append("+%d more" % (len(labels) - shown))
        ax.legend(handles, texts, loc="upper left", ncol=ncol, fontsize=7, frameon=False,
                  bbox_to_anchor=(0, -0.2 / max(ax.bbox.height / 72, 0.2)),
                  borderaxespad=0, handlelength=1.2, handletextpad=0.4, columnspacing=1.0,
                  labelspacing=0.25)


def draw_state_timeline(cv, box, panel, series, ctx):
    from matplotlib.patches import Patch
    left, bottom, width, height = box
    defaults, _ = field_config(panel)
    mappings = defaults.get("mappings") or []
    unit = defaults.get("unit")
    opts = panel.get("options") or {}
    lanes = sorted(series, key=lambda s: natural_key(s["name"]))
    steps = (defaults.get("thresholds") or {}).get("steps") or []
    use_thresholds = len(steps) > 1 or (steps and steps[0].get("color") not in ("text", None))
    distinct = sorted({p[1] for s in lanes for p in s["points"]
                       if isinstance(p[1], float) and math.isfinite(p[1])})
    continuous = len(distinct) > 12

    def style(v):
        text, color = apply_mappings(v, mappings)
        if color is None:
            if use_thresholds:
                color = threshold_color(v, defaults)
            elif continuous:
                import matplotlib
                lo, hi = distinct[0], distinct[-1]
                color = matplotlib.colormaps["viridis"]((v - lo) / (hi - lo) if hi > lo else 0.5)
            else:
                color = PALETTE[distinct.index(v) % len(PALETTE)] if v in distinct else "#9ca3af"
        else:
            color = color_of(color)
        return (text if text is not None else fmt_value(v, unit)), color

    legend_items = {}
    for v in distinct[:12] if not continuous else []:
        text, color = style(v)
        legend_items.setdefault(text, color)
    name_w = min(width * 0.35, max(0.3, max(len(s["name"]) for s in lanes) * 0.058 + 0.12))
    plot_w = width - name_w - 0.2
    ncol, rows, shown = legend_plan(list(legend_items), plot_w, 2)
    legend_h = rows * 0.155 + (0.05 if rows else 0)
    ax = cv.axes(left + name_w + 0.08, bottom + 0.24 + legend_h, plot_w,
                 height - 0.36 - 0.24 - legend_h)
    style_axes(ax)
    ax.spines["left"].set_visible(False)
    n = len(lanes)
    row_h = float(opts.get("rowHeight", 0.9) or 0.9)
    lane_h_in = ax.bbox.height / 72 / max(n, 1)
    for i, s in enumerate(lanes):
        y = n - 1 - i
        pts = sorted((p for p in s["points"] if isinstance(p[1], float) and not math.isnan(p[1])),
                     key=lambda p: p[0])
        segs = []
        for t, v in pts:
            t -= ctx.start
            if segs and segs[-1][2] == v and t - segs[-1][1] <= 1.5 * ctx.step:
                segs[-1][1] = t
            else:
                segs.append([t, t, v])
        for a, b, v in segs:
            b = min(b + ctx.step, ctx.end - ctx.start)
            text, color = style(v)
            ax.barh(y, b - a, left=a, height=row_h, color=color, linewidth=0,
                    alpha=min(1.0, (defaults.get("custom") or {}).get("fillOpacity", 80) / 100.0 + 0.1))
            seg_w_in = (b - a) / (ctx.end - ctx.start) * plot_w
            if opts.get("showValue", "auto") != "never" and lane_h_in > 0.13 and \
                    seg_w_in > len(text) * 0.055 + 0.08:
                ax.text(a + (b - a) / 2, y, text, ha="center", va="center", fontsize=7,
                        color="white" if is_dark(color) else TEXT, clip_on=True)
    ax.set_ylim(-0.5, n - 0.5)
    ax.set_yticks(range(n))
    if lane_h_in >= 0.1:
        ax.set_yticklabels([fit(s["name"], name_w, 7) for s in reversed(lanes)])
    else:
        ax.set_yticklabels([])
    ax.tick_params(axis="y", length=0)
    time_axis(ax, ctx, plot_w)
    if rows:
        handles = [Patch(color=c) for c in list(legend_items.values())[:shown]]
        ax.legend(handles, list(legend_items)[:shown], loc="upper left", ncol=ncol, fontsize=7,
                  frameon=False, bbox_to_anchor=(0, -0.2 / max(ax.bbox.height / 72, 0.2)),
                  borderaxespad=0, handlelength=1.0, handletextpad=0.4, columnspacing=1.0)


def draw_stat(cv, box, panel, items):
    from matplotlib.patches import Rectangle
    left, bottom, width, height = box
    defaults, _ = field_config(panel)
    unit, decimals = defaults.get("unit"), defaults.get("decimals")
    opts = panel.get("options") or {}
    text_mode = opts.get("textMode", "auto")
    color_mode = opts.get("colorMode", "value")
    inner = (left + 0.06, bottom + 0.06, width - 0.12, height - 0.36)
    ax = cv.axes(*inner)
    ax.axis("off")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    n = len(items)
    w_in, h_in = inner[2], inner[3]
    # Columns that make each cell closest to a wide (2.5:1) box.
    best = min(range(1, n + 1), key=lambda k: abs(math.log((w_in / k) / (h_in / math.ceil(n / k)) / 2.5)))
    ncol, nrow = best, int(math.ceil(n / float(best)))
    cw, ch = 1.0 / ncol, 1.0 / nrow
    for i, (name, value) in enumerate(items):
        col, row = i % ncol, i // ncol
        x0, y0 = col * cw, 1 - (row + 1) * ch
        mtext, mcolor = apply_mappings(value, defaults.get("mappings"))
        vtext = mtext if mtext is not None else fmt_value(value, unit, decimals)
        color = color_of(mcolor) if mcolor else (fixed_color(defaults) or
                                                 threshold_color(value, defaults))
        mode = text_mode
        if mode == "auto":
            mode = "value_and_name" if n > 1 else "value"
        big = name if mode == "name" else vtext
        small = name if mode == "value_and_name" else None
        if mode == "none":
            big, small = "", None
        cell_w_pt, cell_h_pt = cw * w_in * 72, ch * h_in * 72
        if color_mode == "background":
            ax.add_patch(Rectangle((x0 + 0.01, y0 + 0.03), cw - 0.02, ch - 0.06, color=color,
                                   alpha=0.9, linewidth=0))
            fg = "white" if is_dark(color) or color == GRAFANA_COLORS["green"] else TEXT
            name_fg = fg
        else:
            fg = color if color_mode == "value" else TEXT
            name_fg = MUTED
        big_fs = min(cell_h_pt * (0.42 if small else 0.58),
                     cell_w_pt * 0.9 / (0.6 * max(len(big), 1)), 34)
        big_fs = max(6, big_fs)
        if small:
            small_fs = max(5.5, min(10, cell_h_pt * 0.2, cell_w_pt * 0.95 / (0.58 * len(small))))
            ax.text(x0 + cw / 2, y0 + ch * 0.8, fit(small, cw * w_in, small_fs), ha="center",
                    va="center", fontsize=small_fs, color=name_fg)
            ax.text(x0 + cw / 2, y0 + ch * 0.36, big, ha="center", va="center", fontsize=big_fs,
                    fontweight="bold", color=fg)
        else:
            ax.text(x0 + cw / 2, y0 + ch / 2, big, ha="center", va="center", fontsize=big_fs,
                    fontweight="bold", color=fg)


def draw_bars(cv, box, panel, items):
    """bargauge / gauge / piechart / barchart: horizontal bars of instant values."""
    from matplotlib.transforms import blended_transform_factory
    left, bottom, width, height = box
    defaults, _ = field_config(panel)
    unit, decimals = defaults.get("unit"), defaults.get("decimals")
    items = sorted(items, key=lambda it: natural_key(it[0]))
    avail_h = height - 0.42
    max_rows = max(1, int(avail_h / 0.16))
    more = 0
    if len(items) > max_rows:
        more = len(items) - (max_rows - 1)
        items = items[:max_rows - 1]
    name_w = min(width * 0.4, max(0.3, max(len(n) for n, _ in items) * 0.058 + 0.1))
    texts = []
    for _, v in items:
        mtext, _ = apply_mappings(v, defaults.get("mappings"))
        texts.append(mtext if mtext is not None else fmt_value(v, unit, decimals))
    value_w = max(len(t) for t in texts) * 0.062 + 0.12
    plot_w = width - name_w - value_w - 0.16
    ax = cv.axes(left + name_w + 0.08, bottom + 0.1 + (0.14 if more else 0), plot_w,
                 height - 0.42 - (0.14 if more else 0))
    ax.set_facecolor("none")
    for s in ax.spines.values():
        s.set_visible(False)
    finite = [v for _, v in items if isinstance(v, float) and math.isfinite(v)]
    lo = defaults.get("min")
    lo = lo if lo is not None else min([0] + finite)
    hi = defaults.get("max")
    hi = hi if hi is not None else (max(finite + [lo]) if finite else lo + 1)
    if hi <= lo:
        hi = lo + 1
    n = len(items)
    tr = blended_transform_factory(ax.transAxes, ax.transData)
    for i, ((name, v), text) in enumerate(zip(items, texts)):
        y = n - 1 - i
        mcolor = apply_mappings(v, defaults.get("mappings"))[1]
        color = color_of(mcolor) if mcolor else (fixed_color(defaults) or threshold_color(v, defaults))
        ax.barh(y, hi - lo, left=lo, height=0.7, color="#eceef1", linewidth=0)
        if isinstance(v, float) and math.isfinite(v):
            ax.barh(y, min(max(v, lo), hi) - lo, left=lo, height=0.7, color=color, linewidth=0)
        ax.text(1.0 + 0.05 / plot_w, y, text, transform=tr, ha="left", va="center", fontsize=7.5,
                color=color if color != GRAFANA_COLORS["green"] else "#3e8e35", fontweight="bold")
    ax.set_xlim(lo, hi)
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xticks([])
    ax.set_yticks(range(n))
    ax.set_yticklabels([fit(nm, name_w, 7.5) for nm, _ in reversed(items)], fontsize=7.5,
                       color=TEXT)
    ax.tick_params(axis="y", length=0, pad=3)
    if more:
        cv.fig.text((left + 0.1) / cv.W, (bottom + 0.06) / cv.H, "+%d more" % more, fontsize=7,
                    color=MUTED)


def table_rows(panel, results):
    """Instant results per refId -> (columns, rows) after merge/organize, Grafana-style."""
    defaults, _ = field_config(panel)
    unit, decimals = defaults.get("unit"), defaults.get("decimals")
    refids = [r for r, res in results if res]
    multi = len(refids) > 1
    value_col = {r: ("Value #%s" % r if multi else "Value") for r in refids}
    merged, order, label_cols = {}, [], []
    for refid, res in results:
        for labels, points in res or []:
            key = tuple(sorted(labels.items()))
            if key not in merged:
                merged[key] = {"Time": datetime.datetime.fromtimestamp(
                    points[-1][0], datetime.timezone.utc).strftime("%H:%M:%S")}
                merged[key].update(labels)
                order.append(key)
                for k in sorted(labels):
                    if k not in label_cols:
                        label_cols.append(k)
            v = points[-1][1]
            mtext = apply_mappings(v, defaults.get("mappings"))[0] if isinstance(v, float) else None
            merged[key][value_col[refid]] = mtext if mtext is not None else fmt_value(v, unit, decimals)
    columns = ["Time"] + label_cols + [value_col[r] for r in refids]
    for tr in panel.get("transformations") or []:
        if tr.get("disabled"):
            continue
        o = tr.get("options") or {}
        if tr.get("id") == "organize":
            excl = o.get("excludeByName") or {}
            columns = [c for c in columns if not excl.get(c)]
            idx = o.get("indexByName") or {}
            if idx:
                columns.sort(key=lambda c: idx.get(c, 1000 + columns.index(c)))
            ren = o.get("renameByName") or {}
            rows = [[merged[k].get(c, "") for c in columns] for k in order]
            columns = [ren.get(c) or c for c in columns]
            merged = {k: dict(zip(columns, r)) for k, r in zip(order, rows)}
        elif tr.get("id") == "filterFieldsByName":
            names = ((o.get("include") or {}).get("names"))
            if names:
                columns = [c for c in columns if c in names]
    rows = [[str(merged[k].get(c, "")) for c in columns] for k in order]
    rows.sort(key=lambda r: [natural_key(x) for x in r])
    return columns, rows


def draw_table(cv, box, panel, results):
    left, bottom, width, height = box
    columns, rows = table_rows(panel, results)
    if not columns:
        columns = [""]
    row_h = 0.19
    max_rows = max(1, int((height - 0.4) / row_h) - 1)
    more = 0
    if len(rows) > max_rows:
        more = len(rows) - (max_rows - 1)
        rows = rows[:max_rows - 1] + [["+%d more" % more] + [""] * (len(columns) - 1)]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) + 2 for i, c in enumerate(columns)]
    total = float(sum(widths))
    ax_h = height - 0.38
    ax = cv.axes(left + 0.08, bottom + 0.06, width - 0.16, ax_h)
    ax.axis("off")
    frac = min(1.0, (len(rows) + 1) * row_h / ax_h)
    table = ax.table(cellText=[[fit(x, width * w / total, 7.5) for x, w in zip(r, widths)]
                               for r in rows] or None,
                     colLabels=[fit(c, width * w / total, 7.5) for c, w in zip(columns, widths)],
                     colWidths=[w / total for w in widths], cellLoc="left", colLoc="left",
                     bbox=[0, 1 - frac, 1, frac])
    table.auto_set_font_size(False)
    for (r, c), cell in table.get_celld().items():
        cell.set_fontsize(7.5)
        cell.set_edgecolor("#e1e4e8")
        cell.set_linewidth(0.5)
        cell.PAD = 0.04
        if r == 0:
            cell.set_facecolor("#eef0f3")
            cell.get_text().set_fontweight("bold")
            cell.get_text().set_color(TEXT)
        else:
            cell.set_facecolor("#fbfbfc")
            cell.get_text().set_color(MUTED if (more and r == len(rows)) else TEXT)


def draw_text_panel(cv, box, panel):
    left, bottom, width, height = box
    content = (panel.get("options") or {}).get("content") or panel.get("content") or ""
    content = re.sub(r"<[^>]+>", "", content)
    content = re.sub(r"(?m)^\s*#+\s*|[*_`]+", "", content)
    chars = max(10, int(width * 72 / (0.58 * 7.5)))
    lines = []
    for para in content.splitlines():
        lines.extend(textwrap.wrap(para, chars) or [""])
    max_lines = max(1, int((height - 0.4) * 72 / 10))
    ax = cv.axes(left + 0.1, bottom + 0.06, width - 0.2, height - 0.4)
    ax.axis("off")
    ax.text(0, 1, "\n".join(lines[:max_lines]), va="top", ha="left", fontsize=7.5, color=TEXT,
            transform=ax.transAxes)


# ---------------------------------------------------------------------------------------------
# Main


class Context:
    pass


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Render a Grafana dashboard's panels from a Prometheus HTTP API into one PNG.",
        epilog="Needs matplotlib and numpy (%s): see this script's docstring." % PINNED)
    p.add_argument("--prometheus", required=True, help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    p.add_argument("--dashboard", required=True, help="Grafana dashboard JSON file")
    p.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                   help="template variable (repeatable)")
    p.add_argument("--start", type=float, help="unix seconds (default: --end minus 10 minutes)")
    p.add_argument("--end", type=float, help="unix seconds (default: now)")
    p.add_argument("--step", type=float, help="range-query step in seconds (default: auto)")
    p.add_argument("--scrape-interval", help="e.g. 15s (default: read from Prometheus's config)")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--title", help="figure title (default: the dashboard's title)")
    p.add_argument("--time-axis", choices=("relative", "clock"), default="relative",
                   help="m:ss since --start (default) or HH:MM:SS UTC")
    p.add_argument("--width", type=float, default=20.0, help="figure width in inches (default 20)")
    p.add_argument("--dpi", type=int, default=100, help="PNG resolution (default 100)")
    p.add_argument("--timeout", type=float, default=30.0, help="per-request HTTP timeout, seconds")
    p.add_argument("--strict", action="store_true", help="exit 3 when any panel's query failed")
    args = p.parse_args(argv)
    given = {}
    for v in args.var:
        if "=" not in v or not v.split("=", 1)[0].strip():
            p.error("--var wants NAME=VALUE, got %r" % v)
        k, val = v.split("=", 1)
        given[k.strip()] = val
    args.given = given
    args.end = time.time() if args.end is None else args.end
    args.start = args.end - 600 if args.start is None else args.start
    if args.end <= args.start:
        p.error("--end (%s) must be after --start (%s)" % (args.end, args.start))
    if args.step is not None and args.step <= 0:
        p.error("--step must be positive")
    if args.scrape_interval is not None and not parse_duration(args.scrape_interval):
        p.error("--scrape-interval wants a duration such as 15s, got %r" % args.scrape_interval)
    if not re.match(r"^https?://", args.prometheus):
        p.error("--prometheus wants an http:// or https:// URL, got %r" % args.prometheus)
    return args


def import_matplotlib():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import importlib
        importlib.import_module("matplotlib.pyplot")
        importlib.import_module("numpy")
    except ImportError as e:
        raise Fatal("%s (%s). This script needs matplotlib and numpy: make a virtual environment "
                    "with `bash tests/setup_python_venv.sh BUILD_DIR/render-venv matplotlib %s` "
                    "(or python3 -m venv V && V/bin/pip install %s) and run the script with its "
                    "python." % (e, sys.executable, PINNED, PINNED))
    return matplotlib


def run(args):
    doc = load_dashboard(args.dashboard)
    items = flatten(doc)
    matplotlib = import_matplotlib()
    import matplotlib.pyplot as plt

    prom = Prometheus(args.prometheus, args.timeout)
    series_from(prom.query("1", args.end))  # reachability: raises Fatal with the fix
    scrape = parse_duration(args.scrape_interval) if args.scrape_interval else None
    scrape = scrape or prom.scrape_interval() or 15.0
    span = args.end - args.start
    step = args.step or max(scrape, math.ceil(span / 250.0))
    step = max(step, span / 11000.0)  # Prometheus's 11,000 points per series limit
    rate = max(4 * step, 4 * scrape, 15.0)

    ctx = Context()
    ctx.start, ctx.end, ctx.step, ctx.clock = args.start, args.end, step, args.time_axis == "clock"
    values = template_vars(doc, args.given)
    values.update({
        "__interval": prom_duration(step), "__interval_ms": str(int(step * 1000)),
        "__rate_interval": prom_duration(rate), "__range": prom_duration(span),
        "__range_s": str(int(round(span))), "__range_ms": str(int(round(span * 1000))),
        "__from": str(int(args.start * 1000)), "__to": str(int(args.end * 1000)),
    })
    missing = set()

    # Queries of every panel, run concurrently.
    placed, total_units = layout(items)
    jobs = []
    for idx, ((kind, obj), _, _, _, _) in enumerate(placed):
        if kind != "panel":
            continue
        ptype = obj.get("type")
        if ptype not in RANGE_TYPES and ptype not in INSTANT_TYPES:
            continue
        for n, t in enumerate(obj.get("targets") or []):
            if not isinstance(t, dict) or t.get("hide") or not t.get("expr"):
                continue
            jobs.append((idx, t.get("refId") or chr(ord("A") + n % 26), ptype in RANGE_TYPES,
                         substitute(t["expr"], values, missing), t.get("legendFormat")))
    for name in sorted(missing):
        print("warning: the dashboard uses $%s, which has no value: pass --var %s=VALUE"
              % (name, name), file=sys.stderr)

    def fetch(job):
        idx, refid, ranged, expr, legend = job
        try:
            data = prom.query_range(expr, args.start, args.end, step) if ranged \
                else prom.query(expr, args.end)
            return series_from(data), None
        except QueryError as e:
            return None, str(e)

    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(fetch, jobs))  # a Fatal propagates from here
    by_panel = {}
    for job, ans in zip(jobs, answers):
        by_panel.setdefault(job[0], []).append((job, ans))

    # Figure geometry.
    margin = 0.2
    col = (args.width - 2 * margin) / 24.0
    unit = max(0.34, col * 0.5)
    header = 0.85
    height = header + total_units * unit + 0.2
    plt.rcParams.update({"font.size": 8, "font.family": "DejaVu Sans"})
    fig = plt.figure(figsize=(args.width, height), facecolor="white")
    cv = Canvas(fig, args.width, height, header, col, unit, margin)
    title = args.title or doc.get("title") or os.path.basename(args.dashboard)
    fig.text(margin / args.width, 1 - 0.12 / height, title, fontsize=17, fontweight="bold",
             color=TEXT, va="top")
    shown_vars = ["%s=%s" % (k, v) for k, v in sorted(args.given.items())]
    utc = datetime.timezone.utc
    t0 = datetime.datetime.fromtimestamp(args.start, utc)
    t1 = datetime.datetime.fromtimestamp(args.end, utc)
    span_text = ("%d min" % round(span / 60)) if span >= 120 else ("%d s" % round(span))
    axis_text = "time axis: HH:MM:SS UTC" if ctx.clock else "time axis: m:ss since the start"
    sub = "   \u00b7   ".join(x for x in [
        "  ".join(shown_vars),
        "%s \u2013 %s UTC (%s)" % (t0.strftime("%Y-%m-%d %H:%M:%S"),
                                   t1.strftime("%H:%M:%S" if t0.date() == t1.date()
                                               else "%Y-%m-%d %H:%M:%S"), span_text),
        "step %s, $__rate_interval %s" % (prom_duration(step), prom_duration(rate)),
        axis_text] if x)
    fig.text(margin / args.width, 1 - 0.52 / height, sub, fontsize=9, color=MUTED, va="top")

    query_errors = render_errors = 0
    for idx, ((kind, obj), x, y, w, h) in enumerate(placed):
        if kind == "row":
            left, bottom, width, hh = cv.cell(x, y, w, h, gap=0.0)
            fig.text((left + 0.02) / cv.W, (bottom + hh * 0.45) / cv.H, obj, fontsize=12.5,
                     fontweight="bold", color=TEXT, va="center")
            fig.add_artist(matplotlib.lines.Line2D(
                [(left + 0.02) / cv.W, (left + width) / cv.W],
                [(bottom + 0.04) / cv.H] * 2, color="#c3c8cf", linewidth=0.8))
            continue
        panel, ptype = obj, obj.get("type") or "?"
        ptitle = substitute(panel.get("title") or "", values, set())
        label = ptitle or "(untitled %s panel)" % ptype
        box = cv.cell(x, y, w, h)
        panel_frame(cv, box, ptitle)
        results = by_panel.get(idx, [])
        errors = [(job[1], ans[1]) for job, ans in results if ans[1]]
        series = []
        for (pidx, refid, ranged, expr, legend), (res, err) in results:
            for labels, points in res or []:
                points = [p for p in points if not isinstance(p[1], str)] or points
                series.append({"name": series_name(labels, legend, expr), "refId": refid,
                               "labels": labels, "points": points})
        try:
            if ptype == "text":
                draw_text_panel(cv, box, panel)
                print("%s: text" % label, file=sys.stderr)
                continue
            if ptype not in RANGE_TYPES and ptype not in INSTANT_TYPES:
                message(cv, box, "panel type '%s' is not rendered" % ptype)
                print("%s: not rendered (panel type %s)" % (label, ptype), file=sys.stderr)
                continue
            if errors and not series:
                message(cv, box, "query error (%s): %s" % errors[0], color="#c4162a")
            elif not series:
                message(cv, box, "No data")
            elif ptype in ("timeseries", "graph", "trend"):
                draw_timeseries(cv, box, panel, series, ctx)
            elif ptype in ("state-timeline", "status-history"):
                draw_state_timeline(cv, box, panel, series, ctx)
            elif ptype in ("stat", "singlestat"):
                draw_stat(cv, box, panel, [(s["name"], s["points"][-1][1]) for s in series])
            elif ptype in ("table", "table-old"):
                draw_table(cv, box, panel, [(job[1], ans[0]) for job, ans in results])
            else:
                draw_bars(cv, box, panel, [(s["name"], s["points"][-1][1]) for s in series])
        except Exception as e:  # a bug here must not lose the other panels
            render_errors += 1
            message(cv, box, "render error: %s: %s" % (type(e).__name__, e), color="#c4162a")
            print("%s: RENDER ERROR %s: %s (a bug in %s)" % (label, type(e).__name__, e,
                                                               sys.argv[0]), file=sys.stderr)
            continue
        parts = ["%d series" % len(series) if series else "no data"]
        for refid, err in errors:
            query_errors += 1
            parts.append("query error (%s): %s" % (refid, err))
        print("%s: %s" % (label, "; ".join(parts)), file=sys.stderr)

    out_dir = os.path.dirname(os.path.abspath(args.out))
    try:
        os.makedirs(out_dir, exist_ok=True)
        tmp = args.out + ".tmp"
        fig.savefig(tmp, dpi=args.dpi, format="png", facecolor="white")
        os.replace(tmp, args.out)
    except OSError as e:
        raise Fatal("cannot write %s: %s; pass --out a path in a writable directory."
                    % (args.out, e.strerror or e))
    finally:
        plt.close(fig)
    print("wrote %s (%d panels, %.0fx%.0f px)" % (
        args.out, sum(1 for (k, _), *_ in placed if k == "panel"), args.width * args.dpi,
        height * args.dpi), file=sys.stderr)
    if render_errors:
        print("error: %d panel(s) could not be drawn (see RENDER ERROR above)" % render_errors,
              file=sys.stderr)
        return 1
    if query_errors and args.strict:
        print("error: %d query error(s) (--strict)" % query_errors, file=sys.stderr)
        return 3
    return 0


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run(args)
    except Fatal as e:
        print("render_dashboard: error: %s" % e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
