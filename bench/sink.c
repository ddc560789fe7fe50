/*
 * bench/sink.c: the HTTP side of bench/dispatch (compiled by it at run time:
 * gcc -O2 -o sink sink.c -I$(pg_config --includedir) -lcurl -lpq).
 *
 *   sink serve PORT DUMPFILE
 *	  HTTP/1.1 keep-alive sink on 127.0.0.1:PORT (epoll, one thread).  Every
 *	  request is answered "200 OK" with an empty body as soon as its body
 *	  has arrived.  Per request it records the arrival time of the request's
 *	  first byte (CLOCK_REALTIME, microseconds) and its Idempotency-Key.
 *	  Control requests (not counted, not recorded):
 *		GET /_stats  "requests N first_us T last_us T conns_open N conns_max N
 *					 cpu_ms N" (first and last request's first byte since the
 *					 last reset, epoch microseconds; the sink's own CPU time)
 *		GET /_reset  forget the records and counters
 *		GET /_dump   write the records to DUMPFILE ("key<TAB>epoch_us" lines)
 *		GET /_quit   exit
 *
 *   sink load URL N CONC
 *	  Raw baseline: N POSTs to URL through one libcurl multi handle, at most
 *	  CONC in flight, one easy handle per request and the multi handle's
 *	  connection cache (keep-alive), the same headers and body shape as the
 *	  ntask worker sends.  Prints "requests N ok N elapsed_s X rate X".
 *
 *   sink worker URL CONC CONNINFO plain|ntask|ntask-async|ntask-claim-invoked QUEUE
 *	  A worker outside the database: one libpq connection and one libcurl
 *	  multi handle, the loop of the ntask worker (claim up to CONC - in
 *	  flight in one transaction, [ntask: mark them invoked in a second],
 *	  send, record the finished ones in one transaction), until a claim
 *	  finds nothing and nothing is in flight.
 *		plain: the hand-written queue bq.job of bench/run (UPDATE ... SKIP
 *			   LOCKED claim, token-checked UPDATE to complete)
 *		ntask: ntask_claim, ntask_invoked, ntask_transition over SQL
 *		ntask-async: the same, but only the invoked transaction waits for
 *			   its commit to be flushed (synchronous_commit off for the claim
 *			   and the record: the invoked commit flushes the claim before
 *			   it; a record lost in a crash leaves an invoked attempt, i.e.
 *			   outcome unknown, as a crash during the transfer does)
 *		ntask-claim-invoked: as ntask, but the claim marks its tasks
 *			   invoked (ntask_claim(..., invoked => true)): no second
 *			   transaction
 *	  Prints "requests N ok N elapsed_s X rate X".
 *
 *   sink watch CONNINFO ACCEPTED TIMEOUT_S
 *	  Poll ntask.worker_stats every 10 ms (each poll its own autocommit
 *	  statement, so no snapshot holds the vacuum horizon back) until
 *	  accepted >= ACCEPTED; prints the time (epoch us), the worker's largest
 *	  VmRSS and private memory (Private_Clean + Private_Dirty of
 *	  /proc/PID/smaps_rollup, and the same without the shared memory
 *	  mappings; sampled every 100 ms; needs root or postgres)
 *	  and, from its first request on (worker_stats.dispatched moved), how
 *	  the polls found the worker in pg_stat_activity (state | step | wait
 *	  event).
 *	  Exits 1 after TIMEOUT_S.
 *
 * Everything talks to 127.0.0.1 only (serve binds it; load and worker
 * refuse other URLs), and every mode is bounded: load by N, worker by the
 * tasks in its table, serve by bench/dispatch, which kills it (by its pid)
 * on exit.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <libpq-fe.h>

static int64_t
now_us(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void
die(const char *msg)
{
	fprintf(stderr, "sink: %s\n", msg);
	exit(1);
}

/* ------------------------------------------------------------------ serve */

#define KEYLEN 64

typedef struct Rec
{
	int64_t		t_us;
	char		key[KEYLEN];
} Rec;

typedef struct Conn
{
	int			fd;
	char	   *in;
	size_t		inlen, incap;
	char	   *out;
	size_t		outlen, outoff, outcap;
	int64_t		t_first;		/* first byte of the request being read; 0: none */
	int			closing;
} Conn;

static Rec *recs;
static size_t nrecs, caprecs;
static long long nrequests;
static int64_t first_us, last_us;	/* first and last request since /_reset */
static int conns_open, conns_max;
static const char *dumpfile;
static int epfd;

static void
append_out(Conn *c, const char *s, size_t n)
{
	if (c->outlen + n > c->outcap)
	{
		c->outcap = (c->outlen + n) * 2;
		c->out = realloc(c->out, c->outcap);
		if (!c->out)
			die("out of memory");
	}
	memcpy(c->out + c->outlen, s, n);
	c->outlen += n;
}

static void
conn_close(Conn *c)
{
	epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	free(c->in);
	free(c->out);
	free(c);
	conns_open--;
}

/* flush what can be written; 0 ok, -1 the connection is gone */
static int
conn_flush(Conn *c)
{
	while (c->outoff < c->outlen)
	{
		ssize_t		n = send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_NOSIGNAL);

		if (n < 0)
		{
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			return -1;
		}
		c->outoff += n;
	}
	if (c->outoff == c->outlen)
		c->outoff = c->outlen = 0;
	{
		struct epoll_event ev = {.events = EPOLLIN | (c->outlen ? EPOLLOUT : 0), .data.ptr = c};

		epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
	}
	if (c->closing && c->outlen == 0)
		return -1;
	return 0;
}

/* value of header name in [hdr, end) (case-insensitive), or NULL; *len set */
static const char *
find_header(const char *hdr, const char *end, const char *name, size_t *len)
{
	size_t		nl = strlen(name);
	const char *p = memchr(hdr, '\n', end - hdr);

	while (p && p + 1 < end)
	{
		const char *line = p + 1;
		const char *eol = memchr(line, '\n', end - line);

		if (!eol)
			eol = end;
		if ((size_t) (eol - line) > nl && strncasecmp(line, name, nl) == 0 && line[nl] == ':')
		{
			const char *v = line + nl + 1;
			const char *ve = eol;

			while (v < ve && (*v == ' ' || *v == '\t'))
				v++;
			while (ve > v && (ve[-1] == '\r' || ve[-1] == ' '))
				ve--;
			*len = ve - v;
			return v;
		}
		p = eol < end ? eol : NULL;
	}
	return NULL;
}

static void
control(Conn *c, const char *path)
{
	char		body[256];
	char		resp[512];
	int			n;

	if (strncmp(path, "/_stats", 7) == 0)
	{
		struct rusage ru;

		getrusage(RUSAGE_SELF, &ru);
		snprintf(body, sizeof(body),
				 "requests %lld first_us %lld last_us %lld conns_open %d conns_max %d cpu_ms %lld\n",
				 nrequests, (long long) first_us, (long long) last_us, conns_open, conns_max,
				 (long long) (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
				 (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000);
	}
	else if (strncmp(path, "/_reset", 7) == 0)
	{
		nrecs = 0;
		nrequests = 0;
		first_us = last_us = 0;
		conns_max = conns_open;
		snprintf(body, sizeof(body), "reset\n");
	}
	else if (strncmp(path, "/_dump", 6) == 0)
	{
		FILE	   *f = fopen(dumpfile, "w");
		size_t		i;

		if (!f)
			snprintf(body, sizeof(body), "error %s\n", strerror(errno));
		else
		{
			for (i = 0; i < nrecs; i++)
				fprintf(f, "%s\t%lld\n", recs[i].key, (long long) recs[i].t_us);
			fclose(f);
			snprintf(body, sizeof(body), "dumped %zu\n", nrecs);
		}
	}
	else if (strncmp(path, "/_quit", 6) == 0)
		exit(0);
	else
		snprintf(body, sizeof(body), "unknown\n");
	n = snprintf(resp, sizeof(resp),
				 "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n\r\n%s",
				 strlen(body), body);
	append_out(c, resp, n);
}

static const char ok_resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";

/* answer every complete request in c->in */
static void
conn_process(Conn *c)
{
	for (;;)
	{
		char	   *hend = memmem(c->in, c->inlen, "\r\n\r\n", 4);
		size_t		hlen, clen = 0, vlen, total;
		const char *v;

		if (!hend)
			return;
		hlen = hend + 4 - c->in;
		v = find_header(c->in, hend + 2, "Content-Length", &vlen);
		if (v)
			clen = strtoul(v, NULL, 10);
		total = hlen + clen;
		if (c->inlen < total)
			return;

		if (hlen > 6 && memcmp(c->in, "GET /_", 6) == 0)
			control(c, c->in + 4);
		else
		{
			nrequests++;
			if (first_us == 0 || c->t_first < first_us)
				first_us = c->t_first;
			if (c->t_first > last_us)
				last_us = c->t_first;
			if (nrecs == caprecs)
			{
				caprecs = caprecs ? caprecs * 2 : 65536;
				recs = realloc(recs, caprecs * sizeof(Rec));
				if (!recs)
					die("out of memory");
			}
			recs[nrecs].t_us = c->t_first;
			v = find_header(c->in, hend + 2, "Idempotency-Key", &vlen);
			if (!v)
				v = "-", vlen = 1;
			if (vlen >= KEYLEN)
				vlen = KEYLEN - 1;
			memcpy(recs[nrecs].key, v, vlen);
			recs[nrecs].key[vlen] = '\0';
			nrecs++;
			append_out(c, ok_resp, sizeof(ok_resp) - 1);
		}
		if (find_header(c->in, hend + 2, "Connection", &vlen) &&
			strncasecmp(find_header(c->in, hend + 2, "Connection", &vlen), "close", 5) == 0)
			c->closing = 1;
		memmove(c->in, c->in + total, c->inlen - total);
		c->inlen -= total;
		/* the next request's first bytes came with this read (pipelining) */
		c->t_first = c->inlen ? c->t_first : 0;
	}
}

static int
serve(int port, const char *dump)
{
	int			lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int			one = 1;
	struct sockaddr_in sa;
	struct epoll_event ev, evs[256];

	dumpfile = dump;
	signal(SIGPIPE, SIG_IGN);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons(port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);	/* 127.0.0.1 only */
	if (bind(lfd, (struct sockaddr *) &sa, sizeof(sa)) < 0 || listen(lfd, 1024) < 0)
	{
		perror("sink: bind/listen");
		return 1;
	}
	epfd = epoll_create1(0);
	ev.events = EPOLLIN;
	ev.data.ptr = NULL;
	epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &ev);
	fprintf(stderr, "sink: listening on 127.0.0.1:%d\n", port);

	for (;;)
	{
		int			n = epoll_wait(epfd, evs, 256, -1);
		int			i;

		for (i = 0; i < n; i++)
		{
			Conn	   *c = evs[i].data.ptr;

			if (c == NULL)
			{
				int			fd;

				while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0)
				{
					c = calloc(1, sizeof(Conn));
					c->fd = fd;
					c->incap = 16384;
					c->in = malloc(c->incap);
					setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
					ev.events = EPOLLIN;
					ev.data.ptr = c;
					epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
					if (++conns_open > conns_max)
						conns_max = conns_open;
				}
				continue;
			}
			if (evs[i].events & EPOLLIN)
			{
				int			gone = 0;

				for (;;)
				{
					ssize_t		r;

					if (c->inlen == c->incap)
					{
						c->incap *= 2;
						c->in = realloc(c->in, c->incap);
					}
					r = recv(c->fd, c->in + c->inlen, c->incap - c->inlen, 0);
					if (r > 0)
					{
						if (c->inlen == 0 && c->t_first == 0)
							c->t_first = now_us(CLOCK_REALTIME);
						c->inlen += r;
						continue;
					}
					if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
						gone = 1;
					break;
				}
				if (c->inlen > 0)
				{
					conn_process(c);
					if (conn_flush(c) < 0)
						gone = 1;
				}
				if (gone)
				{
					conn_close(c);
					continue;
				}
			}
			if (evs[i].events & EPOLLOUT)
			{
				if (conn_flush(c) < 0)
					conn_close(c);
			}
			else if (evs[i].events & (EPOLLERR | EPOLLHUP))
				conn_close(c);
		}
	}
}

/* ------------------------------------------------------------------ curl */

typedef struct Req
{
	long long	id;
	long long	token;
	char	   *key;
	char	   *body;
	CURL	   *easy;
	struct curl_slist *hdrs;
} Req;

static size_t
discard_cb(char *ptr, size_t size, size_t nmemb, void *ud)
{
	return size * nmemb;
}

static void
check_url(const char *url)
{
	if (strncmp(url, "http://127.0.0.1:", 17) != 0)
		die("the URL must be http://127.0.0.1:PORT/... (local traffic only)");
}

/* the request the ntask worker sends (src/dispatch.c dq_start) */
static void
req_start(CURLM *m, const char *url, Req *r, int attempt)
{
	char		line[160];
	CURL	   *e = curl_easy_init();

	r->easy = e;
	r->hdrs = NULL;
	snprintf(line, sizeof(line), "NTask-Attempt: %d", attempt);
	r->hdrs = curl_slist_append(r->hdrs, line);
	snprintf(line, sizeof(line), "NTask-Task-Id: %lld", r->id);
	r->hdrs = curl_slist_append(r->hdrs, line);
	snprintf(line, sizeof(line), "Idempotency-Key: %s", r->key);
	r->hdrs = curl_slist_append(r->hdrs, line);
	r->hdrs = curl_slist_append(r->hdrs, "Expect:");
	r->hdrs = curl_slist_append(r->hdrs, "Content-Type: application/json");
	curl_easy_setopt(e, CURLOPT_PRIVATE, r);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http");
	curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(e, CURLOPT_PROXY, "");
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 10000L);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard_cb);
	curl_easy_setopt(e, CURLOPT_USERAGENT, "ntask-bench/0.2");
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long) strlen(r->body));
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->hdrs);
	curl_multi_add_handle(m, e);
}

/* finished transfers: returns the Req, its HTTP status in *status */
static Req *
req_done(CURLM *m, long *status)
{
	int			left;
	CURLMsg    *msg;

	while ((msg = curl_multi_info_read(m, &left)) != NULL)
	{
		Req		   *r;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &r);
		*status = 0;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, status);
		curl_multi_remove_handle(m, r->easy);
		curl_easy_cleanup(r->easy);
		curl_slist_free_all(r->hdrs);
		r->easy = NULL;
		return r;
	}
	return NULL;
}

/* ------------------------------------------------------------------ load */

static int
load(const char *url, long n, int conc)
{
	CURLM	   *m;
	Req		   *reqs = calloc(n, sizeof(Req));
	long		started = 0, finished = 0, ok = 0;
	int			running = 0;
	int64_t		t0, t1;

	check_url(url);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	m = curl_multi_init();
	for (long i = 0; i < n; i++)
	{
		char		k[64];

		snprintf(k, sizeof(k), "raw-%ld", i + 1);
		reqs[i].id = i + 1;
		reqs[i].key = strdup(k);
		reqs[i].body = "{\"n\": 1}";
	}
	t0 = now_us(CLOCK_MONOTONIC);
	while (finished < n)
	{
		Req		   *r;
		long		status;

		while (started < n && started - finished < conc)
			req_start(m, url, &reqs[started++], 1);
		curl_multi_perform(m, &running);
		while ((r = req_done(m, &status)) != NULL)
		{
			finished++;
			ok += status == 200;
		}
		if (finished < n && started - finished >= conc)
			curl_multi_poll(m, NULL, 0, 10, NULL);
	}
	t1 = now_us(CLOCK_MONOTONIC);
	printf("requests %ld ok %ld elapsed_s %.3f rate %.0f\n", n, ok,
		   (t1 - t0) / 1e6, n / ((t1 - t0) / 1e6));
	return ok == n ? 0 : 1;
}

/* ------------------------------------------------------------------ worker */

static PGresult *
exec_params(PGconn *db, const char *sql, int np, const char *const *vals, ExecStatusType want)
{
	PGresult   *res = PQexecParams(db, sql, np, NULL, vals, NULL, NULL, 0);

	if (PQresultStatus(res) != want)
	{
		fprintf(stderr, "sink worker: %s: %s", sql, PQerrorMessage(db));
		exit(1);
	}
	return res;
}

/* "{1,2,3}" from the ids / tokens of list[0..n) */
static char *
int_array(Req **list, int n, int tokens)
{
	size_t		cap = 32 + (size_t) n * 24;
	char	   *s = malloc(cap);
	size_t		len = 0;

	s[len++] = '{';
	for (int i = 0; i < n; i++)
		len += snprintf(s + len, cap - len, "%s%lld", i ? "," : "",
						tokens ? list[i]->token : list[i]->id);
	s[len++] = '}';
	s[len] = '\0';
	return s;
}

static int
worker(const char *url, int conc, const char *conninfo, const char *mode, const char *queue)
{
	int			ntask = strncmp(mode, "ntask", 5) == 0;
	int			async = strcmp(mode, "ntask-async") == 0;
	int			claim_invoked = strcmp(mode, "ntask-claim-invoked") == 0;
	PGconn	   *db = PQconnectdb(conninfo);
	CURLM	   *m;
	Req		  **done = calloc(conc, sizeof(Req *));
	Req		  **claimed = calloc(conc, sizeof(Req *));
	int			inflight = 0, ndone = 0, exhausted = 0, running = 0;
	long		total = 0, ok = 0;
	int64_t		t0, t1;
	const char *claim_sql, *invoked_sql = NULL, *complete_sql;

	check_url(url);
	if (PQstatus(db) != CONNECTION_OK)
		die(PQerrorMessage(db));
	if (async)
		PQclear(exec_params(db, "SET synchronous_commit = off", 0, NULL, PGRES_COMMAND_OK));
	if (ntask)
	{
		claim_sql = "SELECT c.task_id, c.token, c.task_key, c.payload::text, c.attempt "
			"FROM ntask_claim($1, 'bench external', $2::int, interval '30 seconds') c";
		invoked_sql = "SELECT count(*) FROM unnest($1::bigint[], $2::bigint[]) u(i, t), "
			"LATERAL ntask_invoked(u.i, u.t) x WHERE x <> 'stale'";
		if (claim_invoked)
		{
			claim_sql = "SELECT c.task_id, c.token, c.task_key, c.payload::text, c.attempt "
				"FROM ntask_claim($1, 'bench external', $2::int, interval '30 seconds', "
				"invoked => true) c";
			invoked_sql = NULL;
		}
		complete_sql = "SELECT count(*) FROM unnest($1::bigint[], $2::bigint[]) u(i, t), "
			"LATERAL ntask_transition(u.i, u.t, 'succeeded', NULL, '{\"http_status\": 200}', "
			"NULL, 'provider_accepted') x";
	}
	else
	{
		claim_sql = "WITH c AS (UPDATE bq.job SET state = 'leased', token = nextval('bq.token_seq'), "
			"lease_until = now() + interval '30 seconds' WHERE id IN (SELECT id FROM bq.job "
			"WHERE queue = $1 AND state = 'ready' AND run_at <= now() ORDER BY run_at, id "
			"LIMIT $2::int FOR UPDATE SKIP LOCKED) RETURNING id, token, task_key, payload::text) "
			"SELECT *, 1 FROM c";
		complete_sql = "UPDATE bq.job SET state = 'succeeded' WHERE (id, token) IN "
			"(SELECT * FROM unnest($1::bigint[], $2::bigint[]))";
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	m = curl_multi_init();
	t0 = now_us(CLOCK_MONOTONIC);
	for (;;)
	{
		Req		   *r;
		long		status;

		/* claim (one transaction), then invoked (another), then send */
		if (!exhausted && inflight < conc)
		{
			char		want[16];
			const char *vals[2] = {queue, want};
			PGresult   *res;
			int			n;

			snprintf(want, sizeof(want), "%d", conc - inflight);
			res = exec_params(db, claim_sql, 2, vals, PGRES_TUPLES_OK);
			n = PQntuples(res);
			if (n == 0)
				exhausted = 1;
			for (int i = 0; i < n; i++)
			{
				r = calloc(1, sizeof(Req));
				r->id = atoll(PQgetvalue(res, i, 0));
				r->token = atoll(PQgetvalue(res, i, 1));
				r->key = strdup(PQgetvalue(res, i, 2));
				r->body = strdup(PQgetvalue(res, i, 3));
				claimed[i] = r;
			}
			if (n > 0 && ntask && invoked_sql != NULL)
			{
				char	   *ids = int_array(claimed, n, 0), *toks = int_array(claimed, n, 1);
				const char *v2[2] = {ids, toks};
				PGresult   *ir;

				/* async: only this commit waits for the WAL flush */
				if (async)
					PQclear(exec_params(db, "BEGIN", 0, NULL, PGRES_COMMAND_OK));
				if (async)
					PQclear(exec_params(db, "SET LOCAL synchronous_commit = on", 0, NULL, PGRES_COMMAND_OK));
				ir = exec_params(db, invoked_sql, 2, v2, PGRES_TUPLES_OK);
				if (atoi(PQgetvalue(ir, 0, 0)) != n)
					die("ntask_invoked answered stale");
				PQclear(ir);
				if (async)
					PQclear(exec_params(db, "COMMIT", 0, NULL, PGRES_COMMAND_OK));
				free(ids);
				free(toks);
			}
			for (int i = 0; i < n; i++)
				req_start(m, url, claimed[i], atoi(PQgetvalue(res, i, 4)));
			inflight += n;
			PQclear(res);
		}
		if (exhausted && inflight == 0)
			break;

		curl_multi_poll(m, NULL, 0, inflight < conc && !exhausted ? 0 : 10, NULL);
		curl_multi_perform(m, &running);
		while ((r = req_done(m, &status)) != NULL)
		{
			inflight--;
			total++;
			if (status == 200)
				done[ndone++] = r;
			else
				fprintf(stderr, "sink worker: task %lld: HTTP %ld\n", r->id, status);
		}
		/* record (one transaction) */
		if (ndone > 0)
		{
			char	   *ids = int_array(done, ndone, 0), *toks = int_array(done, ndone, 1);
			const char *v2[2] = {ids, toks};
			PGresult   *res = exec_params(db, complete_sql, 2, v2,
										  ntask ? PGRES_TUPLES_OK : PGRES_COMMAND_OK);

			ok += ndone;
			PQclear(res);
			free(ids);
			free(toks);
			for (int i = 0; i < ndone; i++)
			{
				free(done[i]->key);
				free(done[i]->body);
				free(done[i]);
			}
			ndone = 0;
		}
	}
	t1 = now_us(CLOCK_MONOTONIC);
	printf("requests %ld ok %ld elapsed_s %.3f rate %.0f\n", total, ok,
		   (t1 - t0) / 1e6, ok / ((t1 - t0) / 1e6));
	PQfinish(db);
	return 0;
}

/* ------------------------------------------------------------------ watch */

/* kB of the fields of /proc/PID/FILE whose names are in names[], summed */
static long
proc_kb(int pid, const char *file, const char *const *names)
{
	char		path[64], line[256];
	FILE	   *f;
	long		sum = -1;

	snprintf(path, sizeof(path), "/proc/%d/%s", pid, file);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	while (fgets(line, sizeof(line), f))
		for (int i = 0; names[i]; i++)
		{
			size_t		nl = strlen(names[i]);

			if (strncmp(line, names[i], nl) == 0 && line[nl] == ':')
				sum = (sum < 0 ? 0 : sum) + atol(line + nl + 1);
		}
	fclose(f);
	return sum;
}

/*
 * Private_Clean + Private_Dirty of /proc/PID/smaps without the shared
 * memory mappings (/dev/zero, SYSV, /dev/shm): a shared_buffers page that
 * only this process has touched counts as "private" in smaps_rollup.
 */
static long
proc_private_own(int pid)
{
	char		path[64], line[512];
	FILE	   *f;
	long		sum = 0;
	int			shm = 0;

	snprintf(path, sizeof(path), "/proc/%d/smaps", pid);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	while (fgets(line, sizeof(line), f))
	{
		char	   *sp = strchr(line, ' ');

		if (sp && sp > line && sp[-1] != ':')	/* a mapping's header line */
			shm = strstr(line, "/dev/zero") || strstr(line, "SYSV") || strstr(line, "/dev/shm/");
		else if (!shm && (strncmp(line, "Private_Clean:", 14) == 0 ||
						  strncmp(line, "Private_Dirty:", 14) == 0))
			sum += atol(line + 14);
	}
	fclose(f);
	return sum;
}

typedef struct Tally
{
	char		what[160];
	long		n;
} Tally;

/*
 * watch: poll ntask.worker_stats every 10 ms (one autocommit statement each:
 * no snapshot is held between polls) until accepted >= target; meanwhile
 * tally the worker's pg_stat_activity state / step / wait event and, every
 * 100 ms, its VmRSS and private memory.
 */
static int
watch(const char *conninfo, long long target, double timeout_s)
{
	static const char *const rss[] = {"VmRSS", NULL};
	static const char *const priv[] = {"Private_Clean", "Private_Dirty", NULL};
	PGconn	   *db = PQconnectdb(conninfo);
	Tally		tally[64];
	int			ntally = 0;
	long		nsamples = 0, iter = 0, rss_max = -1, priv_max = -1, own_max = -1;
	int			pid = 0;
	int64_t		t0 = now_us(CLOCK_MONOTONIC);
	long long	accepted = -1, dispatched0 = -1;
	int			started = 0;
	struct timespec ten_ms = {0, 10 * 1000 * 1000};

	if (PQstatus(db) != CONNECTION_OK)
		die(PQerrorMessage(db));
	for (;;)
	{
		PGresult   *res = exec_params(db,
									  "SELECT w.accepted, w.pid, w.dispatched, a.state || ' | ' || "
									  "coalesce(nullif(a.query, ''), '-') || ' | ' || "
									  "coalesce(a.wait_event_type || ':' || a.wait_event, '-') "
									  "FROM ntask.worker_stats w "
									  "LEFT JOIN pg_stat_activity a ON a.pid = w.pid",
									  0, NULL, PGRES_TUPLES_OK);
		const char *what;
		int			i;

		accepted = atoll(PQgetvalue(res, 0, 0));
		pid = atoi(PQgetvalue(res, 0, 1));
		if (accepted >= target)
		{
			PQclear(res);
			break;
		}
		if ((now_us(CLOCK_MONOTONIC) - t0) / 1e6 > timeout_s)
		{
			printf("timeout accepted %lld target %lld\n", accepted, target);
			return 1;
		}
		if (pid > 0 && iter++ % 10 == 0)
		{
			long		r = proc_kb(pid, "status", rss), p = proc_kb(pid, "smaps_rollup", priv);
			long		o = proc_private_own(pid);

			if (r > rss_max)
				rss_max = r;
			if (p > priv_max)
				priv_max = p;
			if (o > own_max)
				own_max = o;
		}
		/* tally from the first request on (the target is read at a tick) */
		if (dispatched0 < 0)
			dispatched0 = atoll(PQgetvalue(res, 0, 2));
		if (started || atoll(PQgetvalue(res, 0, 2)) != dispatched0)
		{
			started = 1;
			what = PQgetisnull(res, 0, 3) ? "(no worker)" : PQgetvalue(res, 0, 3);
			for (i = 0; i < ntally; i++)
				if (strcmp(tally[i].what, what) == 0)
					break;
			if (i == ntally && ntally < 64)
			{
				snprintf(tally[i].what, sizeof(tally[i].what), "%s", what);
				tally[i].n = 0;
				ntally++;
			}
			if (i < ntally)
				tally[i].n++;
			nsamples++;
		}
		PQclear(res);
		nanosleep(&ten_ms, NULL);
	}
	printf("done_us %lld\n", (long long) now_us(CLOCK_REALTIME));
	printf("accepted %lld\n", accepted);
	printf("rss_max_kb %ld\nprivate_max_kb %ld\nprivown_max_kb %ld\n", rss_max, priv_max, own_max);
	printf("samples %ld\n", nsamples);
	for (int i = 0; i < ntally; i++)
		printf("state %5.1f%% %s\n", 100.0 * tally[i].n / (nsamples ? nsamples : 1), tally[i].what);
	PQfinish(db);
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "serve") == 0)
		return serve(atoi(argv[2]), argv[3]);
	if (argc == 5 && strcmp(argv[1], "load") == 0)
		return load(argv[2], atol(argv[3]), atoi(argv[4]));
	if (argc == 7 && strcmp(argv[1], "worker") == 0 &&
		(strcmp(argv[5], "plain") == 0 || strcmp(argv[5], "ntask") == 0 ||
		 strcmp(argv[5], "ntask-async") == 0 ||
		 strcmp(argv[5], "ntask-claim-invoked") == 0))
		return worker(argv[2], atoi(argv[3]), argv[4], argv[5], argv[6]);
	if (argc == 5 && strcmp(argv[1], "watch") == 0)
		return watch(argv[2], atoll(argv[3]), atof(argv[4]));
	fprintf(stderr,
			"usage: sink serve PORT DUMPFILE\n"
			"       sink load URL N CONC\n"
			"       sink worker URL CONC CONNINFO plain|ntask|ntask-async|ntask-claim-invoked QUEUE\n"
			"       sink watch CONNINFO ACCEPTED TIMEOUT_S\n");
	return 2;
}
