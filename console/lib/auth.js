// Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
//
// The console's own login: operators and their scrypt-hashed secrets from
// a file (--users) or one operator from the environment
// (NTASK_CONSOLE_USER + NTASK_CONSOLE_PASSWORD), or the login name a
// reverse proxy asserts in a header (--proxy-user-header).  Sessions live
// in memory (a restart logs everybody out); each has its own CSRF token.
'use strict';

const crypto = require('crypto');
const fs = require('fs');

const NAME_RE = /^[A-Za-z0-9_.@+-]{1,64}$/;

function hashPassword(password) {
	const salt = crypto.randomBytes(16);
	const hash = crypto.scryptSync(password, salt, 32);
	return `scrypt$${salt.toString('base64')}$${hash.toString('base64')}`;
}

function verifyPassword(password, stored) {
	const m = /^scrypt\$([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+)$/.exec(stored || '');
	let expect, got;
	if (m) {
		expect = Buffer.from(m[2], 'base64');
		got = crypto.scryptSync(password, Buffer.from(m[1], 'base64'), expect.length);
	} else {
		// a plain secret (only from the environment): compare digests so
		// the comparison's time does not depend on where they differ
		expect = crypto.createHash('sha256').update(String(stored)).digest();
		got = crypto.createHash('sha256').update(String(password)).digest();
	}
	return expect.length === got.length && crypto.timingSafeEqual(expect, got);
}

function loadUsers(opts) {
	const users = new Map();
	if (opts.usersFile) {
		const text = fs.readFileSync(opts.usersFile, 'utf8');
		for (const [n, line] of text.split('\n').entries()) {
			const l = line.trim();
			if (!l || l.startsWith('#')) continue;
			const i = l.indexOf(':');
			const name = l.slice(0, i), secret = l.slice(i + 1);
			if (i < 1 || !NAME_RE.test(name) || !secret.startsWith('scrypt$'))
				throw new Error(`${opts.usersFile}:${n + 1}: expected name:scrypt$salt$hash (make one with --hash-password)`);
			users.set(name, secret);
		}
	}
	const u = process.env.NTASK_CONSOLE_USER, p = process.env.NTASK_CONSOLE_PASSWORD;
	if (u && p) {
		if (!NAME_RE.test(u)) throw new Error('NTASK_CONSOLE_USER: 1..64 of A-Z a-z 0-9 _ . @ + -');
		users.set(u, p);
	}
	return users;
}

class Sessions {
	constructor(idleMs) {
		this.map = new Map();
		this.idleMs = idleMs || 8 * 3600 * 1000;
	}

	create(user) {
		const sid = crypto.randomBytes(32).toString('base64url');
		const s = { sid, user, csrf: crypto.randomBytes(32).toString('base64url'), seen: Date.now() };
		this.map.set(sid, s);
		return s;
	}

	get(sid) {
		if (!sid) return null;
		const s = this.map.get(sid);
		if (!s) return null;
		if (Date.now() - s.seen > this.idleMs) {
			this.map.delete(sid);
			return null;
		}
		s.seen = Date.now();
		return s;
	}

	drop(sid) { this.map.delete(sid); }

	// a periodic sweep keeps the map from growing with abandoned sessions
	sweep() {
		const now = Date.now();
		for (const [sid, s] of this.map) if (now - s.seen > this.idleMs) this.map.delete(sid);
	}
}

// Failed logins per (address, name): after 5 within 15 minutes, that name
// cannot log in from that address for a minute (429), right password or
// not.  Another operator, or the same one from elsewhere, is not held.
class Throttle {
	constructor() { this.map = new Map(); }

	key(addr, name) { return `${addr}\0${name}`; }

	blocked(addr, name) {
		const e = this.map.get(this.key(addr, name));
		return !!(e && e.until && e.until > Date.now());
	}

	fail(addr, name) {
		const k = this.key(addr, name), now = Date.now();
		let e = this.map.get(k);
		if (!e || now - e.first > 15 * 60000) e = { first: now, n: 0, until: 0 };
		e.n++;
		if (e.n >= 5) e.until = now + 60000;
		this.map.set(k, e);
	}

	ok(addr, name) { this.map.delete(this.key(addr, name)); }

	sweep() {
		const now = Date.now();
		for (const [k, e] of this.map) if (now - e.first > 15 * 60000 && e.until < now) this.map.delete(k);
	}
}

function csrfOk(session, token) {
	if (!session || typeof token !== 'string' || token.length === 0) return false;
	const a = Buffer.from(session.csrf), b = Buffer.from(token);
	return a.length === b.length && crypto.timingSafeEqual(a, b);
}

module.exports = { hashPassword, verifyPassword, loadUsers, Sessions, Throttle, csrfOk, NAME_RE };
