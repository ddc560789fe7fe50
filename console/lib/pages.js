// Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
//
// The pages and the actions.  Reads: ntask's views (queue_stats,
// breaker_stats, repair_queue, attempt_all, saga_status), its tables
// through their indexes, and ntask_explain.  Writes: only ntask's audited
// functions (ntask_queue_pause/resume, ntask_bulk, ntask_replay,
// ntask_cancel, ntask_repair_assign), with the operator's login name as the
// actor.  Every action asks the database again whether this console may
// write (member of ntask_admin, not a standby) before it calls anything.
'use strict';

const { html, fmtInterval, fmtSeconds, json, sparkline } = require('./html');

const PAGE = 50;
const STATES = ['ready', 'leased', 'retry_wait', 'awaiting', 'waiting', 'repair_required', 'succeeded', 'canceled', 'skipped'];
const FILTER_KEYS = ['state', 'reason', 'error_class', 'key_prefix', 'partition_key', 'older_than', 'newer_than'];

function badge(state) { return html`<span class="badge st-${state}">${state}</span>`; }

function dbOf(ctx, i) {
	const db = ctx.dbs[Number(i)];
	if (!/^\d+$/.test(i) || !db) throw new ctx.HttpError(404, 'no such database');
	return db;
}

function taskId(ctx, s) {
	if (!/^\d{1,19}$/.test(s)) throw new ctx.HttpError(404, 'no such task');
	return s;
}

function readonlyNote(r) {
	if (r.writable) return '';
	const why = r.recovery ? 'the server is a standby (in recovery)' : html`role <code>${r.role}</code> is not a member of ntask_admin`;
	return html`<p class="readonly" id="readonly">Read-only: ${why}. No actions.</p>`;
}

function csrfField(ctx) { return html`<input type="hidden" name="csrf" value="${ctx.session.csrf}">`; }

// ---------------------------------------------------------- queue summary

// Per queue: the counts of its unfinished tasks, the oldest due ready
// task, the pause and the limits.  ntask.queue_stats has all of it but
// also counts the finished tasks (one pass over every finished row: about
// 1 s at 1.1M rows, docs/console.md), so the console reads only the unfinished
// rows, through the partial indexes that hold only them (task_due_idx,
// task_repair_idx, task_awaiting_idx, task_waiting_idx): its cost is the
// backlog's, not the history's.  The counts are one subquery grouped by
// queue and joined to ntask.queue, not correlated to the queue row: a
// Citus coordinator refuses a subquery over the distributed ntask.task
// correlated to the reference table ntask.queue (0A000).  A role that may
// not read the tables (ntask_monitor alone) gets queue_stats instead.
async function summaries(db, queue) {
	try {
		const r = await db.query(`SELECT q.queue,
				(q.paused_at IS NOT NULL OR q.paused_until > now()) AS paused,
				q.paused_at, q.paused_by, q.pause_reason,
				CASE WHEN q.paused_until > now() THEN q.paused_until END AS paused_until,
				q.rate_n, q.rate_per, q.partition_rate_n, q.partition_rate_per, q.max_inflight, q.partition_max_inflight,
				coalesce(kp.keys_paused, 0) AS keys_paused,
				coalesce(c.ready, 0) AS ready, coalesce(c.leased, 0) AS leased, coalesce(c.retry_wait, 0) AS retry_wait,
				coalesce(c.repair_required, 0) AS repair_required, coalesce(c.awaiting, 0) AS awaiting,
				coalesce(c.waiting, 0) AS waiting, coalesce(c.unknown_attempts, 0) AS unknown_attempts,
				now() - c.oldest_ready AS oldest_ready_age,
				b.state AS breaker, b.open_until
			FROM ntask.queue q
			LEFT JOIN ntask.breaker_stats b ON b.queue = q.queue
			LEFT JOIN (SELECT k.queue, count(*) AS keys_paused FROM ntask.key_pause k
				WHERE k.until > now() AND ($1::text IS NULL OR k.queue = $1) GROUP BY k.queue) kp ON kp.queue = q.queue
			LEFT JOIN (SELECT t.queue,
					count(*) FILTER (WHERE t.state = 'ready') AS ready,
					count(*) FILTER (WHERE t.state = 'leased') AS leased,
					count(*) FILTER (WHERE t.state = 'retry_wait') AS retry_wait,
					count(*) FILTER (WHERE t.state = 'repair_required') AS repair_required,
					count(*) FILTER (WHERE t.state = 'awaiting') AS awaiting,
					count(*) FILTER (WHERE t.state = 'waiting') AS waiting,
					sum(t.unknown_attempts) AS unknown_attempts,
					min(t.due_at) FILTER (WHERE t.state = 'ready' AND t.due_at <= now()) AS oldest_ready
				FROM ntask.task t
				WHERE ($1::text IS NULL OR t.queue = $1)
				  AND (t.due_at IS NOT NULL OR t.state = 'repair_required' OR t.state = 'awaiting' OR t.state = 'waiting')
				GROUP BY t.queue) c ON c.queue = q.queue
			WHERE ($1::text IS NULL OR q.queue = $1)
			ORDER BY q.queue`, [queue || null]);
		return { rows: r.rows, exact: true };
	} catch (e) {
		if (e.code !== '42501') throw e;
		const r = await db.query(`SELECT s.*, b.state AS breaker, b.open_until
			FROM ntask.queue_stats s LEFT JOIN ntask.breaker_stats b USING (queue)
			WHERE ($1::text IS NULL OR s.queue = $1) ORDER BY s.queue`, [queue || null]);
		return { rows: r.rows, exact: false };
	}
}

// --------------------------------------------------------------- overview

async function overviewOf(ctx, db) {
	const r = await db.rights();
	const stats = await summaries(db, null);
	// the last hour from the ledger: an attempt that ended in the last hour
	// belongs to a task that finished in it (task_finished_idx), went to
	// repair in it (task_repair_idx), is unfinished with attempts
	// (task_due_idx) or awaits a signal (task_awaiting_idx), each an index
	// range of the queues shown (queue = ANY); its attempts are read by
	// primary key and shard (a lateral subquery on the distribution column,
	// which Citus runs on each shard).  Never a scan of the whole ledger or
	// of the finished history.
	let hour = new Map(), hourErr = null;
	try {
		const h = await db.query(`
			SELECT x.queue, a.bucket, sum(a.ok) AS ok, sum(a.failed) AS failed
			FROM (
				SELECT t.queue, t.task_id, t.shard FROM ntask.task t WHERE t.queue = ANY ($1::text[])
					AND t.state IN ('succeeded', 'canceled', 'skipped') AND t.finished_at >= now() - interval '1 hour'
				UNION ALL
				SELECT t.queue, t.task_id, t.shard FROM ntask.task t WHERE t.queue = ANY ($1::text[])
					AND t.state = 'repair_required' AND t.updated_at >= now() - interval '1 hour'
				UNION ALL
				SELECT t.queue, t.task_id, t.shard FROM ntask.task t WHERE t.queue = ANY ($1::text[])
					AND t.due_at IS NOT NULL AND t.attempts > 0
				UNION ALL
				SELECT t.queue, t.task_id, t.shard FROM ntask.task t WHERE t.queue = ANY ($1::text[])
					AND t.state = 'awaiting') x
			CROSS JOIN LATERAL (
				SELECT floor(extract(epoch FROM now() - a.ended_at) / 300)::int AS bucket,
					count(*) FILTER (WHERE a.result = 'succeeded') AS ok,
					count(*) FILTER (WHERE a.result NOT IN ('succeeded', 'canceled', 'skipped', 'released')) AS failed
				FROM ntask.attempt a
				WHERE a.task_id = x.task_id AND a.shard = x.shard AND a.ended_at >= now() - interval '1 hour'
				GROUP BY 1) a
			GROUP BY 1, 2`, [stats.rows.map((s) => s.queue)]);
		for (const row of h.rows) {
			if (!hour.has(row.queue)) hour.set(row.queue, { ok: new Array(12).fill(0), failed: new Array(12).fill(0) });
			const b = Math.min(11, Math.max(0, row.bucket));
			const q = hour.get(row.queue);
			q.ok[11 - b] += Number(row.ok);
			q.failed[11 - b] += Number(row.failed);
		}
	} catch (e) {
		if (e.code !== '42501') throw e;
		hourErr = e;
	}
	const rows = stats.rows.map((s) => {
		const h = hour.get(s.queue) || { ok: new Array(12).fill(0), failed: new Array(12).fill(0) };
		const ok = h.ok.reduce((a, b) => a + b, 0), failed = h.failed.reduce((a, b) => a + b, 0);
		const lim = s;
		const limText = stats.exact ? [
			lim.rate_n ? `${lim.rate_n} per ${fmtInterval(lim.rate_per)}` : null,
			lim.partition_rate_n ? `key: ${lim.partition_rate_n} per ${fmtInterval(lim.partition_rate_per)}` : null,
			lim.max_inflight ? `max ${lim.max_inflight} in flight` : null,
			lim.partition_max_inflight ? `key: max ${lim.partition_max_inflight} in flight` : null,
		].filter(Boolean).join('; ') : '';
		return html`<tr data-queue="${s.queue}">
<td><a href="/d/${db.index}/queue/${encodeURIComponent(s.queue)}">${s.queue}</a></td>
<td class="num">${s.ready}</td><td class="num">${s.leased}</td><td class="num">${s.waiting}</td>
<td class="num">${s.awaiting}</td><td class="num">${s.retry_wait}</td>
<td class="num">${s.repair_required > 0 ? html`<a class="bad" href="/d/${db.index}/queue/${encodeURIComponent(s.queue)}?state=repair_required">${s.repair_required}</a>` : '0'}</td>
<td class="num">${s.unknown_attempts}</td>
<td class="num">${fmtInterval(s.oldest_ready_age)}</td>
<td class="num">${hourErr ? '' : ok}</td>
<td class="num">${hourErr ? '' : (ok + failed ? (100 * failed / (ok + failed)).toFixed(1) + ' %' : '')}</td>
<td>${hourErr ? '' : sparkline(h.ok.map((v, i) => v + h.failed[i]), `succeeded and failed attempts per 5 min in the last hour, ${s.queue}`)}</td>
<td>${s.paused ? html`<span class="paused" title="${s.pause_reason || ''}">paused${s.paused_by ? html` by ${s.paused_by}` : ''}${s.paused_until ? html` until ${s.paused_until}` : ''}</span>` : ''}${Number(s.keys_paused) > 0 ? html` <span class="warn">${s.keys_paused} keys paused</span>` : ''}</td>
<td>${s.breaker ? html`<span class="badge b-${s.breaker}">${s.breaker}</span>` : ''}</td>
<td class="muted">${limText}</td>
</tr>`;
	});
	return html`<section class="db" data-db="${db.index}">
<h2><a href="/d/${db.index}/">${r.db}</a> <span class="muted">${db.label} · ntask ${r.version} · as ${r.role}</span></h2>
${readonlyNote(r)}
${hourErr ? html`<p class="muted">Last hour: not readable by role ${r.role} (<code>${hourErr.code}</code> ${hourErr.message}).</p>` : ''}
<table class="overview"><thead><tr><th>queue</th><th class="num">ready</th><th class="num">leased</th><th class="num">waiting</th>
<th class="num">awaiting</th><th class="num">retry</th><th class="num">repair</th><th class="num">unknown</th>
<th class="num">oldest ready</th><th class="num">succeeded 1 h</th><th class="num">failure rate 1 h</th><th>attempts 1 h</th>
<th>paused</th><th>breaker</th><th>limits</th></tr></thead>
<tbody>${rows}</tbody></table>
</section>`;
}

async function overview(ctx, only) {
	const parts = [];
	for (const db of (only ? [only] : ctx.dbs)) {
		try {
			parts.push(await overviewOf(ctx, db));
		} catch (e) {
			if (!e.code && !e.message) throw e;
			parts.push(html`<section class="db"><h2>${db.label}</h2><p class="error"><code class="sqlstate">${e.code || ''}</code> ${e.message}</p></section>`);
		}
	}
	return {
		title: 'Overview', db: only,
		body: html`<h1>Queues</h1>
<p class="muted"><label><input type="checkbox" id="autorefresh" data-refresh="5"> refresh every 5 s</label></p>
${parts}`,
	};
}

// ------------------------------------------------------------------ queue

function filterOf(params) {
	const f = {};
	for (const k of FILTER_KEYS) {
		const v = params.get(k);
		if (typeof v === 'string' && v !== '') f[k] = v;
	}
	return f;
}

function qs(obj) {
	const p = new URLSearchParams();
	for (const [k, v] of Object.entries(obj)) if (v !== undefined && v !== null && v !== '') p.set(k, v);
	const s = p.toString();
	return s ? '?' + s : '';
}

function encCursor(a) { return Buffer.from(JSON.stringify(a)).toString('base64url'); }
function decCursor(ctx, s) {
	if (!s) return null;
	try {
		const a = JSON.parse(Buffer.from(s, 'base64url').toString('utf8'));
		if (Array.isArray(a)) return a;
	} catch (e) { /* below */ }
	throw new ctx.HttpError(400, 'a stale or damaged page link (cursor); start from the first page');
}

// The tasks of a queue, filtered as ntask_bulk filters, paged by keyset
// along the index that holds the state asked for:
//   ready, leased, retry_wait: task_due_idx, in claim order (priority
//     DESC, due_at, task_id): the rest of the cursor's priority, then the
//     lower ones, each an index range;
//   repair_required: task_repair_idx, latest first (updated_at, task_id);
//   succeeded, canceled, skipped: task_finished_idx (finished_at, task_id);
//   any other (or none): the primary key, newest first.
async function listTasks(ctx, db, queue, f, cursor) {
	const where = ['t.queue = $1'];
	const params = [queue];
	const add = (sql, v) => { params.push(v); where.push(sql.replace('?', '$' + params.length)); };
	if (f.state) add('t.state = ?', f.state);
	if (f.reason) add('t.reason = ?', f.reason);
	if (f.error_class) add('t.last_error_class = ?', f.error_class);
	if (f.partition_key) add('t.partition_key = ?', f.partition_key);
	if (f.key_prefix) add('t.task_key LIKE ?', f.key_prefix.replace(/[\\%_]/g, '\\$&') + '%');
	if (f.older_than) add('t.created_at < now() - ?::interval', f.older_than);
	if (f.newer_than) add('t.created_at > now() - ?::interval', f.newer_than);
	const cols = `t.task_id, t.task_key, t.state, t.priority, t.attempts, t.max_attempts, t.partition_key,
		t.last_error_class, t.reason, t.due_at, t.run_at, t.created_at, t.updated_at, t.finished_at,
		t.lease_owner, t.repair_owner, t.unknown_attempts`;
	const n = PAGE + 1;
	const run = async (extra, xparams, order) => {
		const p = params.concat(xparams);
		const w = where.concat(extra.map((e) => e.replace(/\$(\d+)x/g, (_, k) => '$' + (params.length + Number(k)))));
		return (await db.query(`SELECT ${cols}, t.due_at::text AS due_c, t.updated_at::text AS upd_c,
			t.finished_at::text AS fin_c FROM ntask.task t WHERE ${w.join(' AND ')} ORDER BY ${order} LIMIT ${n}`, p)).rows;
	};
	let rows, next = null;
	const st = f.state;
	if (st === 'ready' || st === 'leased' || st === 'retry_wait') {
		rows = [];
		if (cursor) {
			rows = await run(['t.due_at IS NOT NULL', 't.priority = $1x::int', '(t.due_at, t.task_id) > ($2x::timestamptz, $3x::bigint)'],
				cursor, 't.due_at, t.task_id');
		}
		if (rows.length < n) {
			const more = await run(cursor ? ['t.due_at IS NOT NULL', 't.priority < $1x::int'] : ['t.due_at IS NOT NULL'],
				cursor ? [cursor[0]] : [], 't.priority DESC, t.due_at, t.task_id');
			rows = rows.concat(more.slice(0, n - rows.length));
		}
		if (rows.length > PAGE) {
			const last = rows[PAGE - 1];
			next = [last.priority, last.due_c, last.task_id];
		}
	} else if (st === 'repair_required') {
		rows = await run(cursor ? ['(t.updated_at, t.task_id) < ($1x::timestamptz, $2x::bigint)'] : [], cursor || [],
			't.updated_at DESC, t.task_id DESC');
		if (rows.length > PAGE) next = [rows[PAGE - 1].upd_c, rows[PAGE - 1].task_id];
	} else if (st === 'succeeded' || st === 'canceled' || st === 'skipped') {
		rows = await run(cursor ? ["t.state IN ('succeeded', 'canceled', 'skipped')", '(t.finished_at, t.task_id) < ($1x::timestamptz, $2x::bigint)'] : ["t.state IN ('succeeded', 'canceled', 'skipped')"],
			cursor || [], 't.finished_at DESC, t.task_id DESC');
		if (rows.length > PAGE) next = [rows[PAGE - 1].fin_c, rows[PAGE - 1].task_id];
	} else {
		rows = await run(cursor ? ['t.task_id < $1x::bigint'] : [], cursor || [], 't.task_id DESC');
		if (rows.length > PAGE) next = [rows[PAGE - 1].task_id];
	}
	return { rows: rows.slice(0, PAGE), next };
}

async function queuePage(ctx, db, queue) {
	const r = await db.rights();
	const sres = await summaries(db, queue);
	if (sres.rows.length === 0) throw new ctx.HttpError(404, `no queue "${queue}"`);
	const s = sres.rows[0];
	const f = filterOf(ctx.url.searchParams);
	if (f.state && !STATES.includes(f.state)) throw new ctx.HttpError(400, `unknown state "${f.state}"`);
	const cursor = decCursor(ctx, ctx.url.searchParams.get('after'));
	const { rows, next } = await listTasks(ctx, db, queue, f, cursor);
	const base = `/d/${db.index}/queue/${encodeURIComponent(queue)}`;
	const opt = (v, cur) => html`<option value="${v}"${v === cur ? html` selected` : ''}>${v || 'any'}</option>`;
	const hidden = FILTER_KEYS.filter((k) => k !== 'state' && f[k] !== undefined).map((k) => html`<input type="hidden" name="${k}" value="${f[k]}">`);
	const actions = r.writable ? html`
<section class="actions">
${s.paused && s.paused_at
		? html`<form method="post" action="${base}/resume" class="action" id="resume-form">${csrfField(ctx)}
<label>Reason <input name="reason" required maxlength="2000" size="40"></label>
<button type="submit" name="do" value="resume">Resume queue</button></form>`
		: html`<form method="post" action="${base}/pause" class="action" id="pause-form">${csrfField(ctx)}
<label>Reason <input name="reason" required maxlength="2000" size="40"></label>
<button type="submit" class="danger" name="do" value="pause">Pause queue</button></form>`}
<form method="post" action="${base}/bulk" class="action" id="bulk-form">${csrfField(ctx)}
<input type="hidden" name="step" value="dry_run">
${FILTER_KEYS.filter((k) => f[k] !== undefined).map((k) => html`<input type="hidden" name="${k}" value="${f[k]}">`)}
<label>Bulk action on the tasks this filter shows
<select name="action"><option>replay</option><option>cancel</option><option>reschedule</option></select></label>
<label>Reason <input name="bulk_reason" required maxlength="2000" size="30"></label>
<label>Run at (reschedule) <input name="run_at" placeholder="now" size="22"></label>
<button type="submit" name="do" value="dry_run">Dry run</button>
</form></section>` : '';
	const trs = rows.map((t) => html`<tr data-task="${t.task_id}">
<td><a href="/d/${db.index}/task/${t.task_id}">${t.task_id}</a></td><td class="mono">${t.task_key}</td><td>${badge(t.state)}</td>
<td class="num">${t.attempts}/${t.max_attempts}</td><td class="num">${t.unknown_attempts || ''}</td><td class="num">${t.priority}</td>
<td class="mono">${t.partition_key}</td><td>${t.last_error_class}</td><td>${t.reason}</td>
<td>${t.lease_owner || t.repair_owner || ''}</td>
<td>${t.due_at || t.finished_at || ''}</td><td>${t.created_at}</td></tr>`);
	return {
		title: queue, db,
		body: html`<h1>Queue <span class="mono">${queue}</span> ${s.paused ? html`<span class="paused" id="paused">paused${s.paused_by ? html` by ${s.paused_by}` : ''}${s.pause_reason ? html`: ${s.pause_reason}` : ''}${s.paused_until ? html` until ${s.paused_until}` : ''}</span>` : ''}</h1>
${readonlyNote(r)}
<dl class="kv"><dt>ready</dt><dd>${s.ready} (oldest ${fmtInterval(s.oldest_ready_age) || '–'})</dd><dt>leased</dt><dd>${s.leased}</dd>
<dt>retry_wait</dt><dd>${s.retry_wait}</dd><dt>waiting / awaiting</dt><dd>${s.waiting} / ${s.awaiting}</dd>
<dt>repair_required</dt><dd>${s.repair_required}</dd><dt>unknown outcomes</dt><dd>${s.unknown_attempts} (attempts of unfinished tasks, repair included)</dd>
<dt>finished</dt><dd>${['succeeded', 'canceled', 'skipped'].map((x, i) => html`${i ? ' · ' : ''}<a href="${base}?state=${x}">${x}</a>`)}</dd></dl>
${actions}
<h2>Tasks</h2>
<form method="get" action="${base}" class="filters" id="filters">
<label>state <select name="state">${['', ...STATES].map((v) => opt(v, f.state || ''))}</select></label>
<label>reason <input name="reason" value="${f.reason}" size="14"></label>
<label>error class <input name="error_class" value="${f.error_class}" size="10"></label>
<label>key prefix <input name="key_prefix" value="${f.key_prefix}" size="16"></label>
<label>partition key <input name="partition_key" value="${f.partition_key}" size="12"></label>
<label>older than <input name="older_than" value="${f.older_than}" placeholder="2 hours" size="9"></label>
<label>newer than <input name="newer_than" value="${f.newer_than}" placeholder="6 hours" size="9"></label>
<button type="submit">Filter</button> <a href="${base}">clear</a>
</form>
<table class="tasks"><thead><tr><th>task</th><th>key</th><th>state</th><th class="num">attempts</th><th class="num">unknown</th><th class="num">prio</th>
<th>partition</th><th>error class</th><th>reason</th><th>holder / owner</th><th>due / finished</th><th>enqueued</th></tr></thead>
<tbody>${trs.length ? trs : html`<tr><td colspan="12" class="muted">no task matches</td></tr>`}</tbody></table>
<p class="pager">${cursor ? html`<a href="${base}${qs(f)}">first page</a> · ` : ''}${next ? html`<a id="next-page" href="${base}${qs({ ...f, after: encCursor(next) })}">next ${PAGE} →</a>` : html`<span class="muted">end</span>`}</p>`,
	};
}

// ------------------------------------------------------------------ a task

async function taskPage(ctx, db, id, notice) {
	const r = await db.rights();
	const tr = await db.query(`SELECT task_id, queue, task_key, state, priority, partition_key, attempts, max_attempts,
		run_at, due_at, deadline, token, lease_owner, lease_until, unknown_attempts, last_error_class, last_error_stage,
		outcome, reason, repair_owner, repair_next_action, created_at, updated_at, finished_at, saga_id, enqueued_by,
		progress, progress_at, signal_key, traceparent, has_parents, has_children
		FROM ntask.task WHERE task_id = $1`, [id]);
	if (tr.rows.length === 0) throw new ctx.HttpError(404, `no task ${id} (never enqueued, or pruned by retention)`);
	const t = tr.rows[0];
	const base = `/d/${db.index}/task/${t.task_id}`;
	let story;
	try {
		const withPayload = r.admin && ctx.url.searchParams.get('payload') === '1';
		const ex = await db.query(`SELECT at, event, token, actor, detail FROM ${await db.fn('ntask_explain')}($1, $2)`, [id, withPayload]);
		story = html`<table class="story" id="story"><thead><tr><th>at</th><th>event</th><th class="num">token</th><th>actor</th><th>detail</th></tr></thead><tbody>
${ex.rows.map((e) => html`<tr class="${e.event === 'now' ? 'now' : ''}"><td>${e.at}</td><td>${e.event}</td><td class="num">${e.token}</td><td>${e.actor}</td><td class="detail">${e.detail}</td></tr>`)}
</tbody></table>${r.admin && !withPayload ? html`<p><a href="${base}?payload=1">show the payload</a></p>` : ''}`;
	} catch (e) {
		if (!e.code) throw e;
		story = html`<p class="error"><code class="sqlstate">${e.code}</code> ${e.message}</p>`;
	}
	const [att, rec, cps, par, chi] = await Promise.all([
		db.query(`SELECT token, attempt, worker, claimed_at, invoked_at, ended_at, result, requested, error_class, error_stage,
			outcome_known, outcome, retry_at, detail, progress FROM ntask.attempt_all WHERE task_id = $1 ORDER BY token`, [id]),
		db.query(`SELECT token, committed_at, db_user, encode(payload_digest, 'hex') AS digest FROM ntask.receipt WHERE task_id = $1 ORDER BY token`, [id]),
		db.query(`SELECT step, token, written_at, encode(value_digest, 'hex') AS digest FROM ntask.checkpoint WHERE task_id = $1 ORDER BY written_at, step`, [id]),
		t.has_parents ? db.query(`SELECT d.parent_id AS id, p.queue, p.task_key, p.state FROM ntask.task_dep d
			LEFT JOIN ntask.task p ON p.task_id = d.parent_id WHERE d.task_id = $1 ORDER BY d.parent_id`, [id]) : { rows: [] },
		t.has_children ? db.query(`SELECT d.task_id AS id, c.queue, c.task_key, c.state FROM ntask.task_dep d
			LEFT JOIN ntask.task c ON c.task_id = d.task_id WHERE d.parent_id = $1 ORDER BY d.task_id LIMIT 200`, [id]) : { rows: [] },
	]);
	const saga = t.saga_id ? await db.query(`SELECT * FROM ntask.saga_status WHERE saga_id = $1 ORDER BY kind = 'compensate', step_no`, [t.saga_id]) : null;
	const node = (x, self) => html`<div class="node${self ? ' self' : ''}"><a href="/d/${db.index}/task/${x.id || x.task_id}">${x.id || x.task_id}</a> <span class="mono">${x.queue}:${x.task_key}</span> ${x.state ? badge(x.state) : html`<span class="muted">pruned</span>`}</div>`;
	const graph = (par.rows.length || chi.rows.length) ? html`<h2>Parents and children</h2><div class="graph" id="graph">
<div class="col">${par.rows.map((x) => node(x))}</div>${par.rows.length ? html`<span class="arrow">→</span>` : ''}
<div class="col">${node(t, true)}</div>${chi.rows.length ? html`<span class="arrow">→</span>` : ''}
<div class="col">${chi.rows.map((x) => node(x))}</div></div>` : '';
	const unfinished = ['ready', 'leased', 'retry_wait', 'waiting', 'awaiting', 'repair_required'].includes(t.state);
	const actions = r.writable ? html`<section class="actions">
${t.state === 'repair_required' ? html`<form method="post" action="${base}/replay" class="action" id="replay-form">${csrfField(ctx)}
<label>Reason <input name="reason" required maxlength="2000" size="40"></label><button type="submit">Replay</button></form>
<form method="post" action="${base}/assign" class="action" id="assign-form">${csrfField(ctx)}
<label>Owner <input name="owner" required value="${t.repair_owner || ''}" size="16"></label>
<label>Next action <input name="next_action" required value="${t.repair_next_action || ''}" size="40"></label><button type="submit">Assign</button></form>` : ''}
${unfinished ? html`<form method="post" action="${base}/cancel" class="action" id="cancel-form">${csrfField(ctx)}
<label>Reason <input name="reason" required maxlength="2000" size="40"></label><button type="submit" class="danger">Cancel task</button></form>` : ''}
</section>` : '';
	const yn = (b) => (b === null || b === undefined ? 'running' : b ? 'known' : html`<span class="bad">unknown</span>`);
	return {
		title: `task ${t.task_id}`, db,
		body: html`<h1>Task ${t.task_id} <span class="mono">${t.queue}:${t.task_key}</span> <span id="task-state">${badge(t.state)}</span></h1>
${notice ? html`<p class="notice" id="notice" role="status">${notice}</p>` : ''}
${readonlyNote(r)}
<dl class="kv"><dt>queue</dt><dd><a href="/d/${db.index}/queue/${encodeURIComponent(t.queue)}">${t.queue}</a></dd>
<dt>attempts</dt><dd>${t.attempts} of ${t.max_attempts} (${t.unknown_attempts} unknown)</dd>
<dt>reason</dt><dd>${t.reason || '–'}</dd><dt>repair owner</dt><dd>${t.repair_owner || '–'}${t.repair_next_action ? html` · next: ${t.repair_next_action}` : ''}</dd>
<dt>run at / deadline</dt><dd>${t.run_at} / ${t.deadline}</dd><dt>enqueued</dt><dd>${t.created_at} by ${t.enqueued_by || '?'}</dd>
${t.progress ? html`<dt>progress</dt><dd class="mono">${json(t.progress)} at ${t.progress_at}</dd>` : ''}
${t.signal_key ? html`<dt>signal awaited</dt><dd class="mono">${t.signal_key}</dd>` : ''}
${t.saga_id ? html`<dt>saga</dt><dd><a href="/d/${db.index}/sagas?saga=${t.saga_id}">${t.saga_id}</a></dd>` : ''}</dl>
${actions}
<h2>Story (ntask_explain)</h2>
${story}
${graph}
<h2>Attempts</h2>
<table class="attempts"><thead><tr><th class="num">#</th><th class="num">token</th><th>worker</th><th>claimed</th><th>invoked</th><th>ended</th><th>result</th>
<th>class</th><th>stage</th><th>outcome</th><th>detail</th></tr></thead><tbody>
${att.rows.map((a) => html`<tr><td class="num">${a.attempt}</td><td class="num">${a.token}</td><td>${a.worker}</td><td>${a.claimed_at}</td><td>${a.invoked_at}</td>
<td>${a.ended_at}</td><td>${a.result ? badge(a.result) : html`<span class="muted">running</span>`}</td><td>${a.error_class}</td><td>${a.error_stage}</td>
<td>${yn(a.outcome_known)}${a.outcome ? html` (${a.outcome})` : ''}</td><td class="mono">${json(a.detail)}${a.progress ? html` progress ${json(a.progress)}` : ''}</td></tr>`)}
</tbody></table>
${rec.rows.length ? html`<h2>Receipts</h2><table><thead><tr><th class="num">token</th><th>committed</th><th>by</th><th>digest</th></tr></thead><tbody>
${rec.rows.map((x) => html`<tr><td class="num">${x.token}</td><td>${x.committed_at}</td><td>${x.db_user}</td><td class="mono">${x.digest}</td></tr>`)}</tbody></table>` : ''}
${cps.rows.length ? html`<h2>Checkpoints</h2><table><thead><tr><th>step</th><th class="num">token</th><th>written</th><th>digest</th></tr></thead><tbody>
${cps.rows.map((x) => html`<tr><td class="mono">${x.step}</td><td class="num">${x.token}</td><td>${x.written_at}</td><td class="mono">${x.digest}</td></tr>`)}</tbody></table>` : ''}
${saga ? html`<h2>Saga ${t.saga_id}</h2>${sagaTable(db, saga.rows)}` : ''}`,
	};
}

// ------------------------------------------------------------ repair queue

async function repairPage(ctx, db) {
	const r = await db.rights();
	const rq = await db.query(`SELECT * FROM ntask.repair_queue
		ORDER BY unknown_outcomes > 0 DESC, owner NULLS FIRST, since LIMIT 1000`);
	const row = (x) => html`<tr data-task="${x.task_id}"><td><a href="/d/${db.index}/task/${x.task_id}">${x.task_id}</a></td>
<td><a href="/d/${db.index}/queue/${encodeURIComponent(x.queue)}">${x.queue}</a></td><td class="mono">${x.task_key}</td><td>${x.reason}</td>
<td class="num">${x.attempts}</td><td class="num">${x.known_outcomes}</td><td class="num">${Number(x.unknown_outcomes) ? html`<span class="bad">${x.unknown_outcomes}</span>` : '0'}</td>
<td>${x.last_error_class}${x.last_error_stage ? html` / ${x.last_error_stage}` : ''}</td><td>${x.next_action}</td><td>${x.since}</td></tr>`;
	const head = html`<thead><tr><th>task</th><th>queue</th><th>key</th><th>reason</th><th class="num">attempts</th><th class="num">known</th><th class="num">unknown</th>
<th>last error</th><th>next action</th><th>since</th></tr></thead>`;
	const unknown = rq.rows.filter((x) => Number(x.unknown_outcomes) > 0);
	const byOwner = new Map();
	for (const x of rq.rows.filter((y) => Number(y.unknown_outcomes) === 0)) {
		const k = x.owner || '';
		if (!byOwner.has(k)) byOwner.set(k, []);
		byOwner.get(k).push(x);
	}
	return {
		title: 'Repair queue', db,
		body: html`<h1>Repair queue</h1>${readonlyNote(r)}
${rq.rows.length === 1000 ? html`<p class="muted">The first 1000 are shown.</p>` : ''}
${rq.rows.length === 0 ? html`<p class="muted">Nothing needs a human.</p>` : ''}
${unknown.length ? html`<h2 id="unknown">Unknown outcomes: reconcile with the provider first (${unknown.length})</h2>
<p class="muted">An attempt of these may have taken effect: find out before a replay sends it again.</p>
<table class="repair">${head}<tbody>${unknown.map(row)}</tbody></table>` : ''}
${[...byOwner.entries()].map(([owner, xs]) => html`<h2>${owner ? html`Owner ${owner}` : 'No owner yet'} (${xs.length})</h2>
<table class="repair">${head}<tbody>${xs.map(row)}</tbody></table>`)}`,
	};
}

// ------------------------------------------------------ schedules and sagas

async function schedulesPage(ctx, db) {
	const r = await db.rights();
	const next = await db.fn('ntask_cron_next');
	const sc = await db.query(`SELECT s.name, s.cron, s.queue, s.timezone, s.overlap, s.catchup, s.last_slot,
			n1 AS next_slot, ${next}(s.cron, n1, s.timezone) AS next_slot2,
			(SELECT count(*) FROM ntask.schedule_slot x WHERE x.schedule = s.name AND x.outcome = 'missed'
				AND x.slot > now() - interval '7 days') AS missed_7d,
			(SELECT count(*) FROM ntask.schedule_slot x WHERE x.schedule = s.name AND x.outcome = 'skipped'
				AND x.slot > now() - interval '7 days') AS skipped_7d
		FROM ntask.schedule s, LATERAL ${next}(s.cron, now(), s.timezone) AS n1 ORDER BY s.name`);
	const slots = await db.query(`SELECT s.name, x.slot, x.fired_at, x.task_id, x.outcome, x.reason
		FROM ntask.schedule s, LATERAL (SELECT * FROM ntask.schedule_slot y WHERE y.schedule = s.name ORDER BY y.slot DESC LIMIT 8) x
		ORDER BY s.name, x.slot DESC`);
	return {
		title: 'Schedules', db,
		body: html`<h1>Schedules</h1>${readonlyNote(r)}
<table class="schedules"><thead><tr><th>name</th><th>cron</th><th>time zone</th><th>queue</th><th>overlap</th><th>catch-up</th><th>last slot</th><th>next slots</th>
<th class="num">missed 7 d</th><th class="num">skipped 7 d</th></tr></thead><tbody>
${sc.rows.map((s) => html`<tr><td class="mono">${s.name}</td><td class="mono">${s.cron}</td><td>${s.timezone}</td><td>${s.queue}</td><td>${s.overlap}</td>
<td>${fmtInterval(s.catchup)}</td><td>${s.last_slot}</td><td>${s.next_slot}<br>${s.next_slot2}</td>
<td class="num">${Number(s.missed_7d) ? html`<span class="bad">${s.missed_7d}</span>` : '0'}</td><td class="num">${s.skipped_7d}</td></tr>`)}
</tbody></table>
<h2>Recent slots</h2>
<table><thead><tr><th>schedule</th><th>slot</th><th>fired</th><th>outcome</th><th>task</th><th>reason</th></tr></thead><tbody>
${slots.rows.map((x) => html`<tr><td class="mono">${x.name}</td><td>${x.slot}</td><td>${x.fired_at}</td>
<td><span class="badge ${x.outcome === 'missed' ? 'bad' : x.outcome === 'skipped' ? 'warn' : ''}">${x.outcome}</span></td>
<td>${x.task_id ? html`<a href="/d/${db.index}/task/${x.task_id}">${x.task_id}</a>` : ''}</td><td>${x.reason}</td></tr>`)}
</tbody></table>`,
	};
}

function sagaTable(db, rows) {
	return html`<table class="saga"><thead><tr><th class="num">step</th><th>name</th><th>kind</th><th>queue</th><th>task</th><th>state</th>
<th class="num">attempts</th><th class="num">unknown</th><th>last error</th><th>reason</th></tr></thead><tbody>
${rows.map((x) => html`<tr><td class="num">${x.step_no}</td><td>${x.name}</td><td>${x.kind}</td><td>${x.queue}</td>
<td>${x.task_id ? html`<a href="/d/${db.index}/task/${x.task_id}">${x.task_id}</a>` : html`<span class="muted">not yet</span>`}</td>
<td>${x.task_state ? badge(x.task_state) : ''}</td><td class="num">${x.attempts}${x.max_attempts ? html`/${x.max_attempts}` : ''}</td>
<td class="num">${x.unknown_attempts || ''}</td><td>${x.last_error_class}</td><td>${x.task_reason}</td></tr>`)}
</tbody></table>`;
}

async function sagasPage(ctx, db) {
	const r = await db.rights();
	const one = ctx.url.searchParams.get('saga');
	const before = ctx.url.searchParams.get('before');
	if ((one && !/^\d{1,19}$/.test(one)) || (before && !/^\d{1,19}$/.test(before))) throw new ctx.HttpError(400, 'a saga id is a number');
	// the saga ids of this page by primary key (newest first), then their steps
	const ids = one ? [one] : (await db.query(`SELECT saga_id FROM ntask.saga WHERE ($1::bigint IS NULL OR saga_id < $1)
		ORDER BY saga_id DESC LIMIT 25`, [before || null])).rows.map((x) => x.saga_id);
	const st = ids.length ? await db.query(`SELECT * FROM ntask.saga_status WHERE saga_id = ANY($1::bigint[])
		ORDER BY saga_id DESC, kind = 'compensate', step_no`, [ids]) : { rows: [] };
	const by = new Map();
	for (const x of st.rows) {
		if (!by.has(x.saga_id)) by.set(x.saga_id, []);
		by.get(x.saga_id).push(x);
	}
	const cls = { manual_review: 'bad', compensating: 'warn', compensated: 'warn', succeeded: 'ok', running: '' };
	return {
		title: 'Sagas', db,
		body: html`<h1>Sagas</h1>${readonlyNote(r)}
${ids.length === 0 ? html`<p class="muted">No saga.</p>` : ''}
${[...by.entries()].map(([id, xs]) => html`<section class="saga" id="saga-${id}"><h2>Saga ${id} <span class="mono">${xs[0].saga_key}</span>
<span class="badge ${cls[xs[0].saga_state] || ''}">${xs[0].saga_state}</span></h2>
<p class="muted">started ${xs[0].started_at}, updated ${xs[0].updated_at}${xs[0].finished_at ? html`, finished ${xs[0].finished_at}` : ''}${xs[0].saga_reason ? html` · ${xs[0].saga_reason}` : ''}${xs[0].failed_step ? html` · failed at step ${xs[0].failed_step}` : ''}</p>
${sagaTable(db, xs)}</section>`)}
${!one && ids.length === 25 ? html`<p class="pager"><a href="/d/${db.index}/sagas?before=${ids[ids.length - 1]}">older →</a></p>` : ''}`,
	};
}

// ---------------------------------------------------------------- actions

async function mustWrite(ctx, db) {
	const r = await db.rights();
	if (!r.writable) {
		ctx.log(`refused action by ${ctx.session.user}: read-only (${r.recovery ? 'standby' : 'no ntask_admin'})`);
		throw new ctx.HttpError(403, r.recovery ? 'refused: the server is a standby, the console is read-only'
			: `refused: role ${r.role} is not a member of ntask_admin, the console is read-only`);
	}
	return r;
}

function field(ctx, name) {
	const v = ctx.form.get(name);
	return v === null ? '' : v;
}

async function queueAction(ctx, db, queue, what) {
	await mustWrite(ctx, db);
	const actor = ctx.session.user;
	const base = `/d/${db.index}/queue/${encodeURIComponent(queue)}`;
	if (what === 'pause' || what === 'resume') {
		const fn = await db.fn(what === 'pause' ? 'ntask_queue_pause' : 'ntask_queue_resume');
		const res = await db.query(`SELECT ${fn}($1, $2, $3) AS changed`, [queue, actor, field(ctx, 'reason')]);
		ctx.log(`${what} ${queue} by ${actor}: ${res.rows[0].changed}`);
		ctx.redirect(ctx.res, base);
		return null;
	}
	// bulk: the dry run first, its counts shown, then the confirmed call
	const f = {};
	for (const k of FILTER_KEYS) if (field(ctx, k) !== '') f[k] = field(ctx, k);
	const action = field(ctx, 'action');
	const runAt = field(ctx, 'run_at') || null;
	const step = field(ctx, 'step');
	const fn = await db.fn('ntask_bulk');
	const dry = step !== 'apply';
	const res = await db.query(`SELECT matched, changed, remaining, audit_id FROM ${fn}($1, $2, $3, $4, $5::jsonb,
		dry_run => $6, run_at => $7::timestamptz)`, [queue, action, actor, field(ctx, 'bulk_reason'), JSON.stringify(f), dry, runAt]);
	const b = res.rows[0];
	ctx.log(`bulk ${action} ${queue} by ${actor}${dry ? ' (dry run)' : ''}: matched ${b.matched} changed ${b.changed}`);
	const filterText = Object.keys(f).length ? JSON.stringify(f) : 'every task it applies to';
	if (dry) {
		return {
			title: `bulk ${action}`, db,
			body: html`<h1>Bulk ${action} on <span class="mono">${queue}</span>: dry run</h1>
<p id="dry-run" class="notice">The dry run matched <strong id="matched">${b.matched}</strong> task(s) (filter <code>${filterText}</code>; audit ${b.audit_id}).
${Number(b.matched) > 1000 ? html` A call changes at most 1000; confirm again for the rest.` : ''}</p>
${Number(b.matched) > 0 ? html`<form method="post" action="${base}/bulk" class="action" id="confirm-form">${csrfField(ctx)}
<input type="hidden" name="step" value="apply"><input type="hidden" name="action" value="${action}">
<input type="hidden" name="bulk_reason" value="${field(ctx, 'bulk_reason')}"><input type="hidden" name="run_at" value="${runAt || ''}">
${Object.entries(f).map(([k, v]) => html`<input type="hidden" name="${k}" value="${v}">`)}
<button type="submit" class="danger">Confirm: ${action} ${b.matched} task(s)</button></form>` : ''}
<p><a href="${base}${qs(f)}">back to the queue</a></p>`,
		};
	}
	return {
		title: `bulk ${action}`, db,
		body: html`<h1>Bulk ${action} on <span class="mono">${queue}</span></h1>
<p id="bulk-result" class="notice">Matched ${b.matched}, changed <strong id="changed">${b.changed}</strong>, still matching ${b.remaining} (audit ${b.audit_id}).</p>
<p><a href="${base}${qs(f)}">back to the queue</a></p>`,
	};
}

async function taskAction(ctx, db, id, what) {
	await mustWrite(ctx, db);
	const actor = ctx.session.user;
	let notice;
	if (what === 'replay' || what === 'cancel') {
		const fn = await db.fn(what === 'replay' ? 'ntask_replay' : 'ntask_cancel');
		const res = await db.query(`SELECT ${fn}($1, $2, $3) AS r`, [id, actor, field(ctx, 'reason')]);
		notice = `${what}: ${res.rows[0].r}`;
	} else if (what === 'assign') {
		// the operator's login is the audited actor (the database role
		// beside it in the audit row); the owner is whom the operator names
		const fn = await db.fn('ntask_repair_assign');
		await db.query(`SELECT ${fn}($1, $2, $3, actor => $4)`, [id, field(ctx, 'owner'), field(ctx, 'next_action'), actor]);
		notice = `assigned to ${field(ctx, 'owner')}`;
	} else return undefined;
	ctx.log(`${what} task ${id} by ${actor}: ${notice}`);
	return taskPage(ctx, db, id, notice);
}

// ----------------------------------------------------------------- routing

async function route(ctx, method, path) {
	let m;
	if (method === 'GET' || method === 'HEAD') {
		if (path === '/') return ctx.dbs.length === 1 ? overview(ctx, ctx.dbs[0]) : overview(ctx, null);
		if ((m = /^\/d\/([^/]+)\/$/.exec(path))) return overview(ctx, dbOf(ctx, m[1]));
		if ((m = /^\/d\/([^/]+)\/queue\/([^/]+)$/.exec(path))) return queuePage(ctx, dbOf(ctx, m[1]), decodeURIComponent(m[2]));
		if ((m = /^\/d\/([^/]+)\/task\/([^/]+)$/.exec(path))) return taskPage(ctx, dbOf(ctx, m[1]), taskId(ctx, m[2]));
		if ((m = /^\/d\/([^/]+)\/repair$/.exec(path))) return repairPage(ctx, dbOf(ctx, m[1]));
		if ((m = /^\/d\/([^/]+)\/schedules$/.exec(path))) return schedulesPage(ctx, dbOf(ctx, m[1]));
		if ((m = /^\/d\/([^/]+)\/sagas$/.exec(path))) return sagasPage(ctx, dbOf(ctx, m[1]));
		return undefined;
	}
	if (method === 'POST') {
		if ((m = /^\/d\/([^/]+)\/queue\/([^/]+)\/(pause|resume|bulk)$/.exec(path)))
			return queueAction(ctx, dbOf(ctx, m[1]), decodeURIComponent(m[2]), m[3]);
		if ((m = /^\/d\/([^/]+)\/task\/([^/]+)\/(replay|cancel|assign)$/.exec(path)))
			return taskAction(ctx, dbOf(ctx, m[1]), taskId(ctx, m[2]), m[3]);
	}
	return undefined;
}

module.exports = { route, listTasks };
