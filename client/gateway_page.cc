#include "client/gateway_page.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace profctl {
namespace {

std::string Escape(const std::string& text) {
  return absl::StrReplaceAll(
      text, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}, {"'", "&#39;"}});
}

constexpr char kStyle[] = R"(<style>
body{font:14px system-ui,sans-serif;margin:2em;max-width:60em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}
.error{color:#b00020;font-weight:bold}.muted{color:#666}
</style>)";

// Reads the capture's parameters from #capture's data attributes (the server escaped them), POSTs
// them, then polls the capture until it is done or failed. Text goes in with textContent only.
constexpr char kScript[] = R"(<script>
const box = document.getElementById('capture');
const stateEl = document.getElementById('state');
const errorEl = document.getElementById('error');
function show(state, text) { stateEl.dataset.state = state; stateEl.textContent = text; }
function fail(text) { errorEl.textContent = text; show('failed', 'failed'); }
function el(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  for (const k in (attrs || {})) e.setAttribute(k, attrs[k]);
  return e;
}
function render(c) {
  document.getElementById('fleet-id').textContent = c.id;
  const rows = document.getElementById('nodes');
  rows.replaceChildren();
  for (const n of c.nodes) {
    const tr = el('tr');
    for (const v of [n.node, n.phase, n.events, n.capture_id || '-', n.error || '']) tr.append(el('td', String(v)));
    rows.append(tr);
  }
  const links = document.getElementById('links');
  links.replaceChildren();
  if (c.report) {
    const li = el('li');
    li.append(el('a', 'Report of ' + c.id, {id: 'report-link', href: c.report}));
    links.append(li);
  }
  for (const t of c.traces) {
    const li = el('li');
    li.append(el('a', t.capture_id + '/' + t.file, {class: 'trace-link', href: t.url, download: t.file}));
    li.append(' ' + t.bytes + ' bytes');
    links.append(li);
  }
  if (c.error) errorEl.textContent = c.error;
  show(c.state, c.state);
}
async function follow(id) {
  for (;;) {
    const r = await fetch('api/v1/captures/' + encodeURIComponent(id), {cache: 'no-store'});
    const c = await r.json();
    if (!r.ok) return fail(c.message || r.statusText);
    render(c);
    if (c.state === 'done' || c.state === 'failed') return;
    await new Promise(done => setTimeout(done, 500));
  }
}
async function start() {
  document.getElementById('start').disabled = true;
  show('asking', 'asking');
  const body = {namespace: box.dataset.namespace, pod: box.dataset.pod,
                duration: box.dataset.duration, reason: document.getElementById('reason').value};
  try {
    const r = await fetch('api/v1/captures', {method: 'POST', cache: 'no-store',
        headers: {'Content-Type': 'application/json'}, body: JSON.stringify(body)});
    const c = await r.json();
    if (r.status !== 202) return fail(r.status + ' ' + (c.message || r.statusText));
    await follow(c.id);
  } catch (e) {
    fail(String(e));
  }
}
document.getElementById('start').addEventListener('click', start);
if (box.dataset.start === '1') start();
</script>)";

}  // namespace

std::string CapturePage(const std::string& name_space, const std::string& pod,
                        const std::string& duration, bool start, const std::string& error) {
  const std::string who = Escape(absl::StrCat(name_space, "/", pod));
  std::string page = absl::StrCat(
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Capture ", who, "</title>",
      kStyle, "</head><body>\n<h1>Capture ", who, " for ", Escape(duration),
      "</h1>\n<div id=\"capture\" data-namespace=\"", Escape(name_space), "\" data-pod=\"",
      Escape(pod), "\" data-duration=\"", Escape(duration), "\" data-start=\"",
      start && error.empty() ? "1" : "0", "\">\n");
  if (!error.empty()) {
    absl::StrAppend(
        &page, "<p id=\"error\" class=\"error\">", Escape(error), "</p>\n",
        "<p id=\"state\" data-state=\"refused\">nothing started</p></div></body></html>\n");
    return page;
  }
  absl::StrAppend(
      &page,
      "<p>Every process of the pod, on its node, through that node's profd; the traces go to the "
      "shared store. You need permission to create captures.profd.dev in namespace ",
      Escape(name_space),
      ".</p>\n<p><label>Reason <input id=\"reason\" size=\"40\" value=\"Grafana data "
      "link\"></label> <button id=\"start\">Start capture</button></p>\n"
      "<p>State: <b id=\"state\" data-state=\"ready\">ready</b> <span class=\"muted\">fleet "
      "capture <span id=\"fleet-id\">-</span></span></p>\n<p id=\"error\" class=\"error\"></p>\n"
      "<table><thead><tr><th>node</th><th>phase</th><th>events</th><th>capture</th><th>error</th>"
      "</tr></thead><tbody id=\"nodes\"></tbody></table>\n<ul id=\"links\"></ul>\n</div>\n",
      kScript, "\n</body></html>\n");
  return page;
}

}  // namespace profctl
