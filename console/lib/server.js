// Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
//
// The HTTP side: routing, the login, sessions, CSRF, security headers and
// the error page.  Pages and actions are in pages.js.
'use strict';

const http = require('http');
const { URLSearchParams } = require('url');
const { html } = require('./html');
const auth = require('./auth');
const pages = require('./pages');
const { layout, STATIC } = require('./layout');

const COOKIE = 'ntask_console';
const MAX_BODY = 64 * 1024;

class HttpError extends Error {
	constructor(status, message) {
		super(message);
		this.status = status;
	}
}

function parseCookies(h) {
	const out = {};
	for (const p of (h || '').split(';')) {
		const i = p.indexOf('=');
		if (i > 0) out[p.slice(0, i).trim()] = p.slice(i + 1).trim();
	}
	return out;
}

function readBody(req) {
	return new Promise((resolve, reject) => {
		const ct = (req.headers['content-type'] || '').split(';')[0].trim();
		if (ct !== 'application/x-www-form-urlencoded') {
			reject(new HttpError(415, 'actions take a form (application/x-www-form-urlencoded)'));
			return;
		}
		let size = 0;
		const chunks = [];
		req.on('data', (c) => {
			size += c.length;
			if (size > MAX_BODY) {
				reject(new HttpError(413, 'request too large'));
				req.destroy();
			} else chunks.push(c);
		});
		req.on('end', () => resolve(new URLSearchParams(Buffer.concat(chunks).toString('utf8'))));
		req.on('error', reject);
	});
}

function createServer(opts, dbs, log) {
	const users = auth.loadUsers(opts);
	const sessions = new auth.Sessions(opts.idleMs);
	const throttle = new auth.Throttle();
	const sweeper = setInterval(() => { sessions.sweep(); throttle.sweep(); }, 60000);
	sweeper.unref();
	if (users.size === 0 && !opts.proxyUserHeader)
		throw new Error('no operator can log in: give --users FILE, NTASK_CONSOLE_USER and NTASK_CONSOLE_PASSWORD, or --proxy-user-header');

	function setCookie(res, sid) {
		const attrs = ['Path=/', 'HttpOnly', 'SameSite=Strict'];
		if (opts.secureCookie) attrs.push('Secure');
		res.setHeader('Set-Cookie', `${COOKIE}=${sid}; ${attrs.join('; ')}`);
	}

	function send(res, status, body, type) {
		res.statusCode = status;
		res.setHeader('Content-Type', type || 'text/html; charset=utf-8');
		res.setHeader('Cache-Control', 'no-store');
		res.setHeader('X-Content-Type-Options', 'nosniff');
		res.setHeader('X-Frame-Options', 'DENY');
		res.setHeader('Referrer-Policy', 'no-referrer');
		res.setHeader('Content-Security-Policy',
			"default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'");
		res.end(String(body));
	}

	function redirect(res, to) {
		res.statusCode = 303;
		res.setHeader('Location', to);
		res.setHeader('Cache-Control', 'no-store');
		res.end();
	}

	// who is this?  A session from the cookie, or (behind a proxy that
	// authenticates) the header's name, which gets a session of its own
	function whoIs(req, res) {
		const cookies = parseCookies(req.headers.cookie);
		let s = sessions.get(cookies[COOKIE]);
		if (opts.proxyUserHeader) {
			const name = req.headers[opts.proxyUserHeader.toLowerCase()];
			if (typeof name !== 'string' || !auth.NAME_RE.test(name)) return null;
			if (!s || s.user !== name) {
				s = sessions.create(name);
				setCookie(res, s.sid);
			}
		}
		return s && s.user ? s : null;
	}

	function loginPage(res, status, message, next) {
		send(res, status, layout({ title: 'Log in', user: null }, html`
<h1>ntask console</h1>
${message ? html`<p class="error" role="alert">${message}</p>` : ''}
<form method="post" action="/login" class="login">
<input type="hidden" name="next" value="${next || '/'}">
<label>Name <input name="name" autocomplete="username" required></label>
<label>Password <input name="password" type="password" autocomplete="current-password" required></label>
<button type="submit">Log in</button>
</form>`));
	}

	async function handle(req, res) {
		const url = new URL(req.url, 'http://console.invalid');
		const path = url.pathname;
		const method = req.method;

		if (method === 'GET' && STATIC[path]) {
			send(res, 200, STATIC[path].body, STATIC[path].type);
			return;
		}
		if (path === '/login' && !opts.proxyUserHeader) {
			if (method === 'GET') {
				loginPage(res, 200, null, safeNext(url.searchParams.get('next')));
				return;
			}
			if (method === 'POST') {
				const form = await readBody(req);
				const name = form.get('name') || '', pw = form.get('password') || '';
				const addr = req.socket.remoteAddress || '';
				if (throttle.blocked(addr, name)) {
					log('login refused: too many failures');
					loginPage(res, 429, 'Too many failed logins: wait a minute.', safeNext(form.get('next')));
					return;
				}
				const stored = users.get(name);
				// the same work whether or not the name exists
				const ok = auth.verifyPassword(pw, stored || 'scrypt$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=') && stored !== undefined;
				if (!ok) {
					throttle.fail(addr, name);
					log('login refused');
					loginPage(res, 401, 'Name or password is wrong.', safeNext(form.get('next')));
					return;
				}
				throttle.ok(addr, name);
				const s = sessions.create(name);
				setCookie(res, s.sid);
				log(`login ${name}`);
				redirect(res, safeNext(form.get('next')));
				return;
			}
		}
		const session = whoIs(req, res);
		if (!session) {
			if (opts.proxyUserHeader) throw new HttpError(401, `no valid ${opts.proxyUserHeader} header from the proxy`);
			if (method === 'GET') {
				redirect(res, '/login?next=' + encodeURIComponent(path + url.search));
				return;
			}
			throw new HttpError(401, 'not logged in');
		}
		let form = null;
		if (method === 'POST') {
			form = await readBody(req);
			// every POST, logout included, carries the session's token
			if (!auth.csrfOk(session, form.get('csrf'))) {
				log(`refused POST ${path} by ${session.user}: CSRF token missing or wrong`);
				throw new HttpError(403, 'refused: the form\'s CSRF token is missing or wrong (reload the page and try again)');
			}
			if (path === '/logout') {
				sessions.drop(session.sid);
				res.setHeader('Set-Cookie', `${COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0`);
				redirect(res, opts.proxyUserHeader ? '/' : '/login');
				return;
			}
		} else if (method !== 'GET' && method !== 'HEAD') {
			throw new HttpError(405, 'only GET and POST');
		}
		const ctx = { req, res, url, form, session, dbs, opts, log, send, redirect, HttpError };
		const out = await pages.route(ctx, method, path);
		if (out === undefined) throw new HttpError(404, 'no such page');
		if (out !== null) send(res, out.status || 200, layout({ title: out.title, user: session.user, csrf: session.csrf, dbs, db: out.db }, out.body));
	}

	const server = http.createServer((req, res) => {
		const started = Date.now();
		res.on('finish', () => {
			// the path only: queries may hold filters; never a cookie or a form
			const p = (req.url || '').split('?')[0];
			log(`${req.method} ${p} ${res.statusCode} ${Date.now() - started} ms`);
		});
		handle(req, res).catch((err) => {
			const code = err.code && /^[0-9A-Z]{5}$/.test(err.code) ? err.code : null;
			// a function's refusal: 400; the database unreachable: 503
			const status = err.status || (code ? 400 : err instanceof URIError ? 400 : err.code ? 503 : 500);
			// the message and the SQLSTATE, never a stack trace
			if (!err.status) log(`error ${code || ''} ${err.message}`);
			if (res.headersSent) {
				res.end();
				return;
			}
			const body = html`
<h1>${status === 403 ? 'Refused' : 'Error'}</h1>
<p class="error" role="alert">${code ? html`<code class="sqlstate">${code}</code> ` : ''}${err.message}${err.detail ? html`<br>DETAIL: ${err.detail}` : ''}${err.hint ? html`<br>HINT: ${err.hint}` : ''}</p>
<p><a href="/">Overview</a></p>`;
			const s = (() => { try { return sessions.get(parseCookies(req.headers.cookie)[COOKIE]); } catch (e) { return null; } })();
			send(res, status, layout({ title: 'Error', user: s && s.user, csrf: s && s.csrf, dbs }, body));
		});
	});
	return server;
}

function safeNext(n) {
	// only a path of this console: no scheme, no host, no //
	if (typeof n !== 'string' || !/^\/(?![/\\])[^\s]*$/.test(n)) return '/';
	return n;
}

module.exports = { createServer, HttpError };
