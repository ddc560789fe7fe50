#!/usr/bin/env node
// Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
//
// ntask-console: the operator console (docs/console.md).
//   node console/bin/ntask-console.js --dsn postgresql://console@db1/app \
//        [--dsn ...] [--listen 127.0.0.1:8080] [--users FILE]
//   node console/bin/ntask-console.js --hash-password < secret
'use strict';

const { Database } = require('../lib/db');
const { createServer } = require('../lib/server');
const { hashPassword } = require('../lib/auth');

const USAGE = `usage: ntask-console --dsn DSN [--dsn DSN ...] [--listen HOST:PORT]
                     [--users FILE] [--proxy-user-header NAME] [--secure-cookie]
                     [--statement-timeout MS]
       ntask-console --hash-password   (reads a password on stdin, prints its line for --users)

  --dsn              a postgresql:// URI, one per database (also NTASK_CONSOLE_DSN)
  --listen           where to listen (default 127.0.0.1:8080; loopback unless you say otherwise)
  --users FILE       operators, one "name:scrypt\$salt\$hash" per line (also NTASK_CONSOLE_USERS);
                     or one operator from NTASK_CONSOLE_USER and NTASK_CONSOLE_PASSWORD
  --proxy-user-header NAME
                     trust the login name a reverse proxy puts in header NAME (the proxy
                     must authenticate, set and strip it; listen on loopback only)
  --secure-cookie    mark the session cookie Secure (behind a TLS-terminating proxy)
`;

function parseArgs(argv) {
	const o = { dsns: [], listen: '127.0.0.1:8080' };
	for (let i = 0; i < argv.length; i++) {
		const a = argv[i];
		const val = () => {
			if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
			return argv[++i];
		};
		if (a === '--dsn') o.dsns.push(val());
		else if (a === '--listen') o.listen = val();
		else if (a === '--users') o.usersFile = val();
		else if (a === '--proxy-user-header') o.proxyUserHeader = val();
		else if (a === '--secure-cookie') o.secureCookie = true;
		else if (a === '--statement-timeout') o.statementTimeoutMs = Number(val());
		else if (a === '--hash-password') o.hashPassword = true;
		else if (a === '--help' || a === '-h') o.help = true;
		else throw new Error(`unknown argument ${a}`);
	}
	if (o.dsns.length === 0 && process.env.NTASK_CONSOLE_DSN) o.dsns.push(process.env.NTASK_CONSOLE_DSN);
	if (!o.usersFile && process.env.NTASK_CONSOLE_USERS) o.usersFile = process.env.NTASK_CONSOLE_USERS;
	return o;
}

function log(msg) {
	// one line per event: a message that quotes input cannot forge another
	msg = String(msg).replace(/[\x00-\x1f\x7f]/g, ' ');
	process.stderr.write(`${new Date().toISOString()} ntask-console: ${msg}\n`);
}

async function main() {
	let o;
	try {
		o = parseArgs(process.argv.slice(2));
	} catch (e) {
		process.stderr.write(`ntask-console: ${e.message}\n${USAGE}`);
		process.exit(2);
	}
	if (o.help) {
		process.stdout.write(USAGE);
		return;
	}
	if (o.hashPassword) {
		const chunks = [];
		for await (const c of process.stdin) chunks.push(c);
		const pw = Buffer.concat(chunks).toString('utf8').replace(/\r?\n$/, '');
		if (!pw) {
			process.stderr.write('ntask-console: an empty password\n');
			process.exit(2);
		}
		process.stdout.write(hashPassword(pw) + '\n');
		return;
	}
	if (o.dsns.length === 0) {
		process.stderr.write(`ntask-console: give at least one --dsn\n${USAGE}`);
		process.exit(2);
	}
	const m = /^(.*):(\d+)$/.exec(o.listen);
	if (!m) {
		process.stderr.write('ntask-console: --listen HOST:PORT\n');
		process.exit(2);
	}
	const host = m[1].replace(/^\[(.*)\]$/, '$1'), port = Number(m[2]);
	let server, dbs;
	try {
		dbs = o.dsns.map((d, i) => new Database(i, d, o));
		server = createServer(o, dbs, log);
	} catch (e) {
		process.stderr.write(`ntask-console: ${e.message}\n`);
		process.exit(2);
	}
	for (const db of dbs) {
		try {
			const r = await db.rights();
			log(`${db.label}: ntask ${r.version || '(not installed)'}, role ${r.role}, ${r.writable ? 'read-write' : 'read-only'}`);
		} catch (e) {
			log(`${db.label}: ${e.code || ''} ${e.message} (the pages will say so)`);
		}
	}
	server.on('error', (e) => {
		log(`cannot listen on ${o.listen}: ${e.code || ''} ${e.message}`);
		process.exit(1);
	});
	server.listen(port, host, () => {
		const a = server.address();
		const shown = a.family === 'IPv6' ? `[${a.address}]` : a.address;
		log(`listening on http://${shown}:${a.port}/`);
		if (!['127.0.0.1', '::1', 'localhost'].includes(host)) log(`warning: listening on ${host}, not loopback`);
	});
	const stop = () => {
		server.close();
		Promise.all(dbs.map((d) => d.close())).finally(() => process.exit(0));
		setTimeout(() => process.exit(0), 2000).unref();
	};
	process.on('SIGTERM', stop);
	process.on('SIGINT', stop);
}

main();
