// Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
//
// The browser half of t/045_console.pl: Debian's chromium, driven by
// playwright-core, clicks through the console as an operator would.  It
// prints one "ok - ..." or "not ok - ..." line per check (the TAP file
// turns each into a test) and runs the worker's SQL with psql itself, so
// the story goes: find the task in repair, read its story, replay it after
// a dry run, a worker drains it, it shows succeeded; pause a queue and a
// claim gets nothing; a read-only operator sees no action and a forged
// POST is refused.  Screenshots go to $SHOTS.
//
// Environment: CONSOLE_URL, RO_URL, ADMIN_USER, ADMIN_PASSWORD, RO_USER,
// RO_PASSWORD, PSQL, PGDSN, SHOTS, CHROMIUM (default /usr/bin/chromium).
'use strict';

const { chromium } = require('playwright-core');
const { execFileSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

const E = process.env;
let failed = 0;
function check(cond, what, detail) {
	if (cond) console.log(`ok - ${what}`);
	else {
		failed++;
		console.log(`not ok - ${what}${detail !== undefined ? ' # ' + String(detail).replace(/\s+/g, ' ').slice(0, 400) : ''}`);
	}
}

function psql(sql) {
	return execFileSync(E.PSQL, ['-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=1', '-d', E.PGDSN, '-c', sql],
		{ encoding: 'utf8' }).trim();
}

// a token that differs from t in its last character
function wrong(t) { return t.slice(0, -1) + (t.endsWith('A') ? 'B' : 'A'); }

async function shot(page, name) {
	if (!E.SHOTS) return;
	fs.mkdirSync(E.SHOTS, { recursive: true });
	await page.screenshot({ path: path.join(E.SHOTS, name + '.png'), fullPage: true });
}

async function login(page, base, user, password) {
	await page.goto(base + '/');
	await page.fill('input[name=name]', user);
	await page.fill('input[name=password]', password);
	await Promise.all([page.waitForNavigation(), page.click('form.login button')]);
}

// every task id of a listing, page after page by its "next" link
async function walk(page, url) {
	const ids = [];
	let pages = 0;
	await page.goto(url);
	for (;;) {
		pages++;
		ids.push(...await page.$$eval('table.tasks tr[data-task]', (trs) => trs.map((t) => t.getAttribute('data-task'))));
		const next = await page.$('#next-page');
		if (!next || pages > 50) break;
		await Promise.all([page.waitForNavigation(), next.click()]);
	}
	return { ids, pages };
}

async function main() {
	const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ntask-console-chromium-'));
	const ctx = await chromium.launchPersistentContext(dataDir, {
		executablePath: E.CHROMIUM || '/usr/bin/chromium',
		headless: true,
		viewport: { width: 1400, height: 900 },
		args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
			'--disable-background-networking', '--disable-component-update', '--disable-sync'],
	});
	try {
		const page = ctx.pages()[0] || await ctx.newPage();
		page.setDefaultTimeout(60000);
		const base = E.CONSOLE_URL;

		// --- the overview
		await page.goto(base + "/");
		check(page.url().includes('/login'), 'without a login the overview sends to the login page', page.url());
		await login(page, base, E.ADMIN_USER, 'wrong-' + E.ADMIN_PASSWORD);
		check((await page.textContent('body')).includes('Name or password is wrong'), 'a wrong password is refused');
		await login(page, base, E.ADMIN_USER, E.ADMIN_PASSWORD);
		const mailRepair = await page.textContent('tr[data-queue=mail] a.bad');
		check(mailRepair.trim() === '1', 'the overview shows queue mail with 1 task in repair', mailRepair);
		check(await page.$('#readonly') === null, 'the admin console is not read-only');
		check((await page.textContent('tr[data-queue=mail]')).includes('100.0 %'), 'the overview shows the last hour\'s failure rate from the ledger',
			await page.textContent('tr[data-queue=mail]'));
		await shot(page, 'overview');

		// every value is escaped: a task key with markup shows as text
		await page.goto(`${base}/d/0/queue/mail`);
		check((await page.textContent('table.tasks')).includes('welcome:<b>43</b>') && await page.$('table.tasks b') === null,
			'a task key with markup is shown as text, not markup');
		await page.goto(`${base}/`);

		// --- find the task in repair and read its story
		await Promise.all([page.waitForNavigation(), page.click('tr[data-queue=mail] a.bad')]);
		const rows = await page.$$eval('table.tasks tr[data-task]', (trs) => trs.map((t) => t.textContent));
		check(rows.length === 1 && rows[0].includes('welcome:42') && rows[0].includes('budget_exhausted'),
			'the queue page filtered by state lists the task in repair', rows.join(' | '));
		const tid = await page.getAttribute('table.tasks tr[data-task]', 'data-task');
		await Promise.all([page.waitForNavigation(), page.click(`table.tasks tr[data-task="${tid}"] a`)]);
		const now = await page.textContent('#story tr.now');
		check(now.includes('repair_required: budget_exhausted') && now.includes('1 with unknown outcome'),
			'the task page tells the story: in repair, budget spent, the outcome unknown', now);
		check((await page.textContent('table.attempts')).includes('unknown'), 'the attempt ledger shows the unknown outcome');
		check(await page.$('#replay-form') !== null && await page.$('#cancel-form') !== null, 'the admin sees replay and cancel');
		await shot(page, 'task');

		await page.goto(base + '/d/0/repair');
		check((await page.textContent('body')).includes('Unknown outcomes: reconcile'), 'the repair queue puts unknown outcomes first');
		check(await page.$(`#unknown ~ table tr[data-task="${tid}"]`) !== null, 'the task is under the unknown outcomes');
		await shot(page, 'repair');

		// --- replay after a dry run (ntask_bulk with the task's key as the filter)
		await page.goto(`${base}/d/0/queue/mail?state=repair_required&key_prefix=welcome%3A42`);
		await page.selectOption('#bulk-form select[name=action]', 'replay');
		await page.fill('#bulk-form input[name=bulk_reason]', 'provider fixed the mailbox (OPS-17)');
		await Promise.all([page.waitForNavigation(), page.click('#bulk-form button')]);
		check((await page.textContent('#matched')).trim() === '1', 'the dry run counts 1 matching task');
		check(psql(`SELECT state FROM ntask.task WHERE task_id = ${tid}`) === 'repair_required', 'the dry run changed nothing');
		await shot(page, 'bulk-dry-run');
		await Promise.all([page.waitForNavigation(), page.click('#confirm-form button')]);
		check((await page.textContent('#changed')).trim() === '1', 'the confirmed replay changed 1 task');
		check(psql(`SELECT state FROM ntask.task WHERE task_id = ${tid}`) === 'ready', 'the task is ready again');

		// a worker drains it
		const claimed = psql(`SELECT max(r.result) FILTER (WHERE c.task_id = ${tid}) FROM ntask_claim('mail', 'psql-worker', 5) c,
			LATERAL ntask_transition(c.task_id, c.token, 'succeeded') r`);
		check(claimed === 'applied', 'a worker (psql) claims the replayed task and it succeeds', claimed);
		let state = '';
		for (let i = 0; i < 30 && state !== 'succeeded'; i++) {
			await page.goto(`${base}/d/0/task/${tid}`);
			state = (await page.textContent('#task-state')).trim();
			if (state !== 'succeeded') await page.waitForTimeout(500);
		}
		check(state === 'succeeded', 'the task page shows it succeeded', state);
		const story = await page.textContent('#story');
		check(/replay[\s\S]*alice/.test(story) || /alice[\s\S]*replay/.test(story), 'its story has the replay, by the operator', story);
		await shot(page, 'task-succeeded');

		// --- pause a queue and see claims stop
		await page.goto(`${base}/d/0/queue/push`);
		await page.fill('#pause-form input[name=reason]', 'provider incident INC-9');
		await Promise.all([page.waitForNavigation(), page.click('#pause-form button')]);
		const paused = await page.textContent('#paused');
		check(paused.includes('paused by alice') && paused.includes('INC-9'), 'the queue shows paused by the operator, with the reason', paused);
		check(psql(`SELECT count(*) FROM ntask_claim('push', 'psql-worker', 10)`) === '0', 'a claim on the paused queue gets nothing');
		await shot(page, 'queue');
		await page.fill('#resume-form input[name=reason]', 'provider recovered');
		await Promise.all([page.waitForNavigation(), page.click('#resume-form button')]);
		check(await page.$('#paused') === null, 'resumed');
		check(psql(`SELECT count(*) FROM ntask_claim('push', 'psql-worker', 10)`) === '1', 'after the resume a claim gets the task');

		// a function's refusal shows its SQLSTATE, never a stack
		await page.goto(`${base}/d/0/queue/push`);
		await page.fill('#bulk-form input[name=bulk_reason]', 'x');
		await page.selectOption('#bulk-form select[name=action]', 'reschedule');
		await page.fill('#bulk-form input[name=run_at]', 'infinity');
		await Promise.all([page.waitForNavigation(), page.click('#bulk-form button')]);
		const err = await page.textContent('p.error');
		check(/22023/.test(err) && !/at .*\.js:\d+/.test(await page.content()), 'a refused bulk shows 22023 and its message, no stack trace', err);

		// --- keyset paging against the database's own order
		const want = (sql) => psql(sql).split('\n').filter(Boolean);
		let w = await walk(page, `${base}/d/0/queue/many?state=ready`);
		let exp = want(`SELECT task_id FROM ntask.task WHERE queue = 'many' AND state = 'ready' ORDER BY priority DESC, due_at, task_id`);
		check(w.pages >= 2 && JSON.stringify(w.ids) === JSON.stringify(exp), `ready tasks page by keyset in claim order (${w.pages} pages, ${w.ids.length} tasks)`,
			`${w.ids.length} vs ${exp.length}`);
		w = await walk(page, `${base}/d/0/queue/many?state=succeeded`);
		exp = want(`SELECT task_id FROM ntask.task WHERE queue = 'many' AND state = 'succeeded' ORDER BY finished_at DESC, task_id DESC`);
		check(w.pages >= 2 && JSON.stringify(w.ids) === JSON.stringify(exp), `succeeded tasks page by keyset (${w.pages} pages)`, `${w.ids.length} vs ${exp.length}`);
		w = await walk(page, `${base}/d/0/queue/many`);
		exp = want(`SELECT task_id FROM ntask.task WHERE queue = 'many' ORDER BY task_id DESC`);
		check(w.pages >= 3 && JSON.stringify(w.ids) === JSON.stringify(exp), `all tasks page by keyset (${w.pages} pages)`, `${w.ids.length} vs ${exp.length}`);
		w = await walk(page, `${base}/d/0/queue/many?state=ready&key_prefix=k1`);
		exp = want(`SELECT task_id FROM ntask.task WHERE queue = 'many' AND state = 'ready' AND task_key LIKE 'k1%' ORDER BY priority DESC, due_at, task_id`);
		check(JSON.stringify(w.ids) === JSON.stringify(exp), `a key prefix filters as ntask_bulk does (${w.ids.length} tasks)`);

		// a workflow: p2 waits for p1 (leased by the claim above)
		const p2 = psql(`SELECT task_id FROM ntask.task WHERE queue = 'push' AND task_key = 'p2'`);
		await page.goto(`${base}/d/0/task/${p2}`);
		const graph = await page.textContent('#graph');
		check(/push:p1\s*leased[\s\S]*push:p2\s*waiting/.test(graph), 'a waiting task shows its parent in the graph', graph);
		check((await page.textContent('#story tr.now')).includes('waiting for 1 of 1 parents'), 'and its story says what it waits for');
		await shot(page, 'task-graph');

		await page.goto(`${base}/d/0/schedules`);
		check((await page.textContent('table.schedules')).includes('nightly'), 'the schedules page lists the schedule');
		await shot(page, 'schedules');
		await page.goto(`${base}/d/0/sagas`);
		check((await page.textContent('body')).includes('order:1'), 'the sagas page lists the saga with its steps');
		await shot(page, 'sagas');

		// --- a forged POST on the admin console: no token, a wrong token
		const csrf = await page.getAttribute('header input[name=csrf]', 'value');
		// a forged request: the browser's cookies (the session), a form
		// without the page's token (the pages' CSP forbids a script's fetch,
		// so it goes through playwright's request API of this context)
		const forge = async (url, token) => {
			const form = { reason: 'forged' };
			if (token !== null) form.csrf = token;
			const r = await ctx.request.post(url, { form, maxRedirects: 0 });
			return [r.status(), await r.text()];
		};
		let [st, body] = await forge(`${base}/d/0/queue/push/pause`, null);
		check(st === 403 && body.includes('CSRF'), 'admin console: a POST without the CSRF token is refused', st);
		[st] = await forge(`${base}/d/0/queue/push/pause`, wrong(csrf));
		check(st === 403, 'admin console: a POST with a wrong CSRF token is refused', st);
		check(psql(`SELECT paused FROM ntask.queue_stats WHERE queue = 'push'`) === 'f', 'the forged pauses paused nothing');

		// --- the read-only operator
		await Promise.all([page.waitForNavigation(), page.click('header form button')]);
		await login(page, E.RO_URL, E.RO_USER, E.RO_PASSWORD);
		check(await page.$('#readonly') !== null, 'the read-only console says it is read-only');
		await shot(page, 'readonly');
		const counts = {};
		for (const p of ['/d/0/queue/mail', '/d/0/queue/push', `/d/0/task/${tid}`, '/d/0/repair']) {
			await page.goto(E.RO_URL + p);
			counts[p] = (await page.$$('form.action')).length + (await page.$$('main form[method=post]')).length;
		}
		check(Object.values(counts).every((n) => n === 0), 'the read-only operator sees no action button', JSON.stringify(counts));
		const rcsrf = await page.getAttribute('header input[name=csrf]', 'value');
		for (const [what, tok] of [['no token', null], ['a wrong token', wrong(rcsrf)], ['the right token', rcsrf]]) {
			const [s2, b2] = await forge(`${E.RO_URL}/d/0/queue/mail/pause`, tok);
			check(s2 === 403 && b2.includes('Refused'), `read-only console: a forged pause with ${what} is refused (403)`, s2);
		}
		check(psql(`SELECT paused FROM ntask.queue_stats WHERE queue = 'mail'`) === 'f', 'the read-only forged POSTs changed nothing');
	} finally {
		await ctx.close();
		fs.rmSync(dataDir, { recursive: true, force: true });
	}
}

main().then(() => process.exit(failed ? 1 : 0), (e) => {
	console.log(`not ok - the browser script ran to its end # ${String(e && e.message).replace(/\s+/g, ' ').slice(0, 600)}`);
	process.exit(1);
});
