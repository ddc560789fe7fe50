// Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
//
// The page frame, the style sheet and the one small script.
'use strict';

const { html } = require('./html');

const CSS = `
:root { --fg:#1d2433; --muted:#5b6477; --line:#d8dce4; --bg:#fff; --warn:#a15c00; --bad:#b3261e; --ok:#1e7b34; --accent:#2f5bd3; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); margin: 0; }
header { display: flex; gap: 1.2em; align-items: center; padding: .5em 1.2em; border-bottom: 1px solid var(--line); background: #f5f7fb; flex-wrap: wrap; }
header .brand { font-weight: 700; }
header nav a { margin-right: .9em; }
header .who { margin-left: auto; color: var(--muted); }
header form { display: inline; }
main { padding: 1em 1.2em 3em; max-width: 1500px; }
a { color: var(--accent); text-decoration: none; }
a:hover { text-decoration: underline; }
h1 { font-size: 1.35em; margin: .3em 0 .6em; }
h2 { font-size: 1.1em; margin: 1.4em 0 .5em; }
table { border-collapse: collapse; width: 100%; margin: .4em 0 1em; }
th, td { border-bottom: 1px solid var(--line); padding: .3em .5em; text-align: left; vertical-align: top; }
th { font-weight: 600; color: var(--muted); font-size: .92em; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.muted { color: var(--muted); }
.error { color: var(--bad); border: 1px solid var(--bad); padding: .6em .8em; border-radius: 4px; background: #fdf3f2; }
.notice { border: 1px solid var(--ok); padding: .6em .8em; border-radius: 4px; background: #f1faf3; }
.readonly { color: var(--warn); border: 1px solid var(--warn); padding: .3em .6em; border-radius: 4px; background: #fff8ec; display: inline-block; }
.badge { display: inline-block; padding: 0 .45em; border-radius: 3px; font-size: .85em; border: 1px solid var(--line); }
.st-repair_required, .b-open, .bad { color: var(--bad); border-color: var(--bad); }
.st-succeeded, .ok { color: var(--ok); border-color: var(--ok); }
.st-leased, .st-retry_wait, .b-half_open, .warn { color: var(--warn); border-color: var(--warn); }
.paused { color: var(--warn); font-weight: 600; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: .92em; }
.story td.detail { white-space: pre-wrap; }
.story tr.now td { font-weight: 600; background: #f5f7fb; }
form.inline { display: inline-flex; gap: .4em; align-items: center; margin: .2em 0; flex-wrap: wrap; }
form.filters { display: flex; flex-wrap: wrap; gap: .6em; align-items: end; margin-bottom: .8em; }
form.filters label, form.action label { display: flex; flex-direction: column; font-size: .85em; color: var(--muted); }
form.action { border: 1px solid var(--line); border-radius: 4px; padding: .6em .8em; margin: .5em 0; display: flex; flex-wrap: wrap; gap: .6em; align-items: end; }
form.login { display: flex; flex-direction: column; gap: .6em; max-width: 20em; }
input, select, button { font: inherit; padding: .25em .45em; }
button { cursor: pointer; border: 1px solid var(--accent); background: var(--accent); color: #fff; border-radius: 3px; }
button.danger { background: var(--bad); border-color: var(--bad); }
button.plain { background: none; color: var(--accent); border: none; padding: 0; }
.spark { color: var(--accent); vertical-align: middle; }
.graph { display: flex; gap: 1.5em; align-items: center; margin: .5em 0 1em; }
.graph .col { display: flex; flex-direction: column; gap: .4em; }
.graph .node { border: 1px solid var(--line); border-radius: 4px; padding: .3em .6em; }
.graph .node.self { border-color: var(--accent); border-width: 2px; }
.graph .arrow { color: var(--muted); font-size: 1.4em; }
dl.kv { display: grid; grid-template-columns: max-content 1fr; gap: .15em 1em; margin: .3em 0 1em; }
dl.kv dt { color: var(--muted); }
dl.kv dd { margin: 0; }
.pager { margin: .5em 0; }
`;

const JS = `
// ntask console: the only script.  Reloads a page marked
// data-refresh="N" every N seconds while its box is ticked.
(function () {
	var box = document.getElementById('autorefresh');
	if (!box) return;
	var secs = parseInt(box.getAttribute('data-refresh'), 10) || 5;
	var key = 'ntask-console-refresh';
	box.checked = sessionStorage.getItem(key) === '1';
	box.addEventListener('change', function () { sessionStorage.setItem(key, box.checked ? '1' : '0'); });
	setInterval(function () { if (box.checked && !document.querySelector('form.action input:focus')) location.reload(); }, secs * 1000);
})();
`;

const STATIC = {
	'/static/console.css': { type: 'text/css; charset=utf-8', body: CSS },
	'/static/console.js': { type: 'text/javascript; charset=utf-8', body: JS },
};

function layout(p, body) {
	const db = p.db;
	return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${p.title ? p.title + ' · ' : ''}ntask console</title>
<link rel="stylesheet" href="/static/console.css">
<script src="/static/console.js" defer></script>
</head><body>
<header><span class="brand"><a href="/">ntask console</a></span>
${db ? html`<nav><span class="muted">${db.label}:</span>
 <a href="/d/${db.index}/">Overview</a>
 <a href="/d/${db.index}/repair">Repair queue</a>
 <a href="/d/${db.index}/schedules">Schedules</a>
 <a href="/d/${db.index}/sagas">Sagas</a></nav>` : ''}
${p.user ? html`<span class="who">${p.user}
 <form method="post" action="/logout"><input type="hidden" name="csrf" value="${p.csrf}"><button class="plain" type="submit">log out</button></form></span>` : ''}
</header>
<main>
${body}
</main></body></html>`;
}

module.exports = { layout, STATIC };
