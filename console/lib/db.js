// Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
//
// One pool per --dsn.  The console reads ntask's views, tables and
// functions and writes only through ntask's audited SQL functions.
'use strict';

const pg = require('pg');

// timestamps stay Date, bigint (int8) as strings (task ids can pass 2^53
// on a Citus install: ids carry the shard in their high bits)

function qi(name) { return '"' + String(name).replace(/"/g, '""') + '"'; }

function parseDsn(dsn) {
	if (!/^postgres(ql)?:\/\//.test(dsn)) throw new Error('a --dsn is a postgresql:// URI');
	return require('pg-connection-string').parse(dsn);
}

// a DSN for display: user@host:port/db, never a password
function describeDsn(dsn) {
	try {
		const cs = require('pg-connection-string').parse(dsn);
		const host = cs.host || process.env.PGHOST || 'localhost';
		return `${cs.user || process.env.PGUSER || ''}@${host}:${cs.port || 5432}/${cs.database || ''}`;
	} catch (e) {
		return '(unparsable DSN)';
	}
}

class Database {
	constructor(index, dsn, opts) {
		this.index = index;
		this.label = describeDsn(dsn);
		// the console's statements are short: JIT compiling one whose plan
		// the planner thinks costly (a million-row table) costs seconds, and
		// parallel workers for a bitmap scan of the backlog cost more than
		// they save on a busy server (the overview's counts took 2.5 times
		// as long with them, docs/console.md).  The URI is parsed here so
		// that its own options are kept and added to.
		const cfg = parseDsn(dsn);
		this.pool = new pg.Pool({
			...cfg,
			options: `${cfg.options || ''} -c jit=off -c max_parallel_workers_per_gather=0`.trim(),
			application_name: cfg.application_name || 'ntask-console',
			max: opts.poolSize || 4,
			statement_timeout: opts.statementTimeoutMs || 10000,
			idleTimeoutMillis: 30000,
		});
		// a lost connection is reported on the next query; never crash
		this.pool.on('error', () => {});
		this.schema = null;
	}

	async query(text, params) {
		return this.pool.query(text, params);
	}

	// the schema of ntask's functions (normally public), quoted
	async fn(name) {
		if (!this.schema) {
			const r = await this.query(`SELECT n.nspname FROM pg_extension e
				JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'ntask'`);
			if (r.rows.length === 0) {
				const e = new Error('extension ntask is not installed in this database');
				e.code = '42704';
				throw e;
			}
			this.schema = qi(r.rows[0].nspname);
		}
		return `${this.schema}.${qi(name)}`;
	}

	// what this console may do here, asked afresh for every request (and
	// again inside every action): admin = member of ntask_admin, and not a
	// standby
	async rights() {
		const r = await this.query(`SELECT current_user AS role, current_database() AS db,
			pg_is_in_recovery() AS recovery,
			EXISTS (SELECT FROM pg_roles WHERE rolname = 'ntask_admin')
				AND pg_has_role(current_user, 'ntask_admin', 'MEMBER') AS admin,
			(SELECT extversion FROM pg_extension WHERE extname = 'ntask') AS version`);
		const x = r.rows[0];
		x.writable = x.admin && !x.recovery;
		return x;
	}

	async close() { await this.pool.end(); }
}

module.exports = { Database, qi, describeDsn };
