// Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
//
// HTML with every interpolated value escaped: html`<td>${value}</td>`.
// Only what another html`` template (or raw()) produced goes in as is, so
// a task key, a reason or an error message can never become markup.
'use strict';

class Raw {
	constructor(s) { this.s = s; }
	toString() { return this.s; }
}

function esc(v) {
	if (v === null || v === undefined) return '';
	return String(v).replace(/[&<>"'`]/g, (c) => ({
		'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;',
	}[c]));
}

function part(v) {
	if (v instanceof Raw) return v.s;
	if (Array.isArray(v)) return v.map(part).join('');
	if (v instanceof Date) return esc(fmtTime(v));
	return esc(v);
}

function html(strings, ...values) {
	let out = strings[0];
	for (let i = 0; i < values.length; i++) out += part(values[i]) + strings[i + 1];
	return new Raw(out);
}

function raw(s) { return new Raw(String(s)); }

function fmtTime(d) {
	if (!(d instanceof Date)) return d;
	return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

// a PostgreSQL interval as node-postgres parses it, in words
function fmtInterval(iv) {
	if (iv === null || iv === undefined) return '';
	if (typeof iv === 'string') return iv;
	let s = (iv.days || 0) * 86400 + (iv.hours || 0) * 3600 + (iv.minutes || 0) * 60
		+ (iv.seconds || 0) + (iv.milliseconds || 0) / 1000;
	s += (iv.months || 0) * 30 * 86400 + (iv.years || 0) * 365 * 86400;
	return fmtSeconds(s);
}

function fmtSeconds(s) {
	if (s === null || s === undefined || Number.isNaN(s)) return '';
	s = Math.max(0, Math.round(s));
	if (s < 60) return `${s} s`;
	if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
	if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
	return `${Math.floor(s / 86400)} days ${Math.floor((s % 86400) / 3600)} h`;
}

function json(v) {
	if (v === null || v === undefined) return '';
	return JSON.stringify(v);
}

// an inline SVG sparkline of counts (oldest first); no script, no library
function sparkline(values, title) {
	const w = 120, h = 24, n = values.length;
	const max = Math.max(1, ...values);
	const pts = values.map((v, i) => `${(i * w / Math.max(1, n - 1)).toFixed(1)},${(h - 2 - v * (h - 4) / max).toFixed(1)}`);
	return html`<svg class="spark" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}" role="img" aria-label="${title}"><title>${title}</title><polyline fill="none" stroke="currentColor" stroke-width="1.5" points="${pts.join(' ')}"/></svg>`;
}

module.exports = { html, raw, esc, Raw, fmtTime, fmtInterval, fmtSeconds, json, sparkline };
