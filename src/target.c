/*-------------------------------------------------------------------------
 *
 * target.c
 *	  A queue's http target: parse and check the jsonb once, the same way
 *	  for ntask_queue_set (which refuses a bad target) and for the worker
 *	  (which sends to it).
 *
 *	  {"type": "http", "url": "https://...", "method": "POST" | "PUT",
 *	   "timeout_ms": 1..600000, "headers": {"Name": "value", ...},
 *	   "reconcile_url": "https://...", "max_inflight": 1..1000,
 *	   "keep_alive": true | false}
 *
 * Only "type" and "url" are required.  Unknown keys are refused (a typo
 * must not silently drop a setting).  Header names must be HTTP tokens,
 * values free of CR, LF and other controls, and the headers ntask sets
 * itself are refused (http_parse.c).  Targets of type "external" belong to
 * external workers and are stored as given; any other type is refused.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/target.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "compat.h"
#include "target.h"

#include <curl/curl.h>

#include "http_parse.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"


pg_noreturn static void tg_error(const char *msg, const char *detail);
static char *tg_string(JsonbValue *v, const char *key);
static int	tg_int(JsonbValue *v, const char *key, int lo, int hi);
static bool tg_bool(JsonbValue *v, const char *key);
static char *tg_url(JsonbValue *v, const char *key, char **host);

static void
tg_error(const char *msg, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("ntask: invalid http target: %s", msg),
			 detail ? errdetail("%s", detail) : 0,
			 errhint("See docs/worker.md for the target format.")));
}

static char *
tg_string(JsonbValue *v, const char *key)
{
	if (v->type != jbvString)
		tg_error(psprintf("\"%s\" must be a string", key), NULL);
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/* tg_bool: a JSON boolean, else an error */
static bool
tg_bool(JsonbValue *v, const char *key)
{
	if (v->type != jbvBool)
		tg_error(psprintf("\"%s\" must be true or false", key), NULL);
	return v->val.boolean;
}

static int
tg_int(JsonbValue *v, const char *key, int lo, int hi)
{
	int64		n;

	if (v->type != jbvNumeric)
		tg_error(psprintf("\"%s\" must be a number", key), NULL);
	n = DatumGetInt64(DirectFunctionCall1(numeric_int8,
										  NumericGetDatum(v->val.numeric)));
	if (n < lo || n > hi)
		tg_error(psprintf("\"%s\" must be between %d and %d", key, lo, hi), NULL);
	return (int) n;
}

/* tg_has: the parsed URL has this part (user, password, zone id) */
static bool
tg_has(CURLU *h, CURLUPart what)
{
	char	   *x = NULL;
	CURLUcode	rc = curl_url_get(h, what, &x, 0);

	if (x)
		curl_free(x);
	return rc == CURLUE_OK;
}

/*
 * tg_url
 *		An http(s) URL as libcurl parses it (its URL API: the parser the
 *		transfer uses, so the host checked against the allowlist is the host
 *		connected to); *host gets that host, lower-cased, without brackets
 *		and without one trailing dot.  Refused (22023): what curl refuses, a
 *		scheme other than http/https, user info (credentials belong in
 *		"headers"; "a@b" hides the real host from a reader), an IPv6 zone
 *		id, a host that is not ASCII (write IDN hosts in punycode), port 0.
 */
static char *
tg_url(JsonbValue *v, const char *key, char **host)
{
	char	   *url = tg_string(v, key);
	CURLU	   *h;
	CURLUcode	rc;
	char	   *part = NULL;
	const char *problem = NULL;
	const char *detail = NULL;
	char	   *out = NULL;

	if (strlen(url) > 2048)
		tg_error(psprintf("\"%s\" is longer than 2048 bytes", key), NULL);
	h = curl_url();
	if (h == NULL)
		elog(ERROR, "ntask: out of memory in curl_url");
	rc = curl_url_set(h, CURLUPART_URL, url, 0);
	if (rc != CURLUE_OK)
	{
		problem = "is not a URL libcurl accepts";
		detail = curl_url_strerror(rc);
	}
	else if (strstr(url, ":///") != NULL &&
			 strstr(url, ":///") == strstr(url, "://"))
	{
		/* curl reads "http:///x" as host x; a reader sees no host at all */
		problem = "has no host";
	}
	else if (curl_url_get(h, CURLUPART_SCHEME, &part, 0) != CURLUE_OK ||
			 (strcmp(part, "http") != 0 && strcmp(part, "https") != 0))
		problem = "is not an http:// or https:// URL";
	else if (tg_has(h, CURLUPART_USER) || tg_has(h, CURLUPART_PASSWORD))
	{
		problem = "has user info";
		detail = "Credentials belong in \"headers\"; in a URL, \"a@b\" sends the request to b.";
	}
	else if (tg_has(h, CURLUPART_ZONEID))
		problem = "has an IPv6 zone id";
	else
	{
		char	   *port = NULL;

		if (part)
			curl_free(part);
		part = NULL;
		if (curl_url_get(h, CURLUPART_PORT, &port, 0) == CURLUE_OK &&
			strcmp(port, "0") == 0)
			problem = "has port 0";
		if (port)
			curl_free(port);
		if (problem == NULL &&
			curl_url_get(h, CURLUPART_HOST, &part, 0) == CURLUE_OK &&
			part[0] != '\0')
		{
			size_t		n = strlen(part);
			size_t		i;
			const char *b = part;

			if (n >= 2 && part[0] == '[' && part[n - 1] == ']')
				b++, n -= 2;
			else if (n >= 2 && part[n - 1] == '.')
				n--;			/* "host." is the same DNS name as "host" */
			out = pnstrdup(b, n);
			for (i = 0; out[i]; i++)
			{
				unsigned char c = (unsigned char) out[i];

				if (c >= 0x80 || c <= 0x20)
					problem = "has a host that is not ASCII (write IDN names in punycode)";
				out[i] = (char) pg_ascii_tolower(c);
			}
		}
		else if (problem == NULL)
			problem = "has no host";
	}
	if (part)
		curl_free(part);
	curl_url_cleanup(h);
	if (problem)
		tg_error(psprintf("\"%s\" %s", key, problem), detail);
	*host = out;
	return url;
}

/*
 * NtaskCheckTargetType
 *		A target names its type: "http" (the background worker dispatches
 *		it) or "external" (your own workers read it; its other keys are
 *		yours).  Anything else, a missing type, or another spelling
 *		("HTTP") would leave the queue's tasks waiting forever with no one
 *		to take them, so it is refused (22023).
 */
void
NtaskCheckTargetType(Jsonb *target)
{
	JsonbValue	v;
	char	   *type;

	if (getKeyJsonValueFromContainer(&target->root, "type", 4, &v) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: target has no \"type\""),
				 errhint("Use {\"type\": \"http\", \"url\": ...} for the background worker, or {\"type\": \"external\", ...} for your own workers.")));
	if (v.type != jbvString)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ntask: target \"type\" must be a string")));
	type = pnstrdup(v.val.string.val, v.val.string.len);
	if (strcmp(type, "http") == 0 || strcmp(type, "external") == 0)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("ntask: unknown target type \"%s\"", type),
			 pg_strcasecmp(type, "http") == 0 || pg_strcasecmp(type, "external") == 0 ?
			 errhint("Target types are lower case: \"http\" or \"external\".") :
			 errhint("Known types: \"http\" (dispatched by the background worker) and \"external\" (read by your own workers).")));
}

/* NtaskTargetIsHttp: target is an object whose "type" is "http". */
bool
NtaskTargetIsHttp(Jsonb *target)
{
	JsonbValue	v;

	if (target == NULL || !JB_ROOT_IS_OBJECT(target))
		return false;
	if (getKeyJsonValueFromContainer(&target->root, "type", 4, &v) == NULL)
		return false;
	return v.type == jbvString && v.val.string.len == 4 &&
		memcmp(v.val.string.val, "http", 4) == 0;
}

/*
 * NtaskParseHttpTarget
 *		The checked target (palloc'd in the current context).  ERROR 22023
 *		naming the first problem.
 */
NtaskHttpTarget *
NtaskParseHttpTarget(Jsonb *target)
{
	NtaskHttpTarget *t = palloc0(sizeof(NtaskHttpTarget));
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	k,
				v;
	bool		has_url = false;

	t->timeout_ms = 10000;
	it = JsonbIteratorInit(&target->root);
	tok = JsonbIteratorNext(&it, &v, true);
	if (tok != WJB_BEGIN_OBJECT)
		tg_error("the target must be a JSON object", NULL);
	while ((tok = JsonbIteratorNext(&it, &k, true)) == WJB_KEY)
	{
		char	   *key = pnstrdup(k.val.string.val, k.val.string.len);

		tok = JsonbIteratorNext(&it, &v, true);
		Assert(tok == WJB_VALUE);
		if (strcmp(key, "type") == 0)
		{
			if (strcmp(tg_string(&v, key), "http") != 0)
				tg_error("\"type\" must be \"http\"", NULL);
		}
		else if (strcmp(key, "url") == 0)
		{
			t->url = tg_url(&v, key, &t->host);
			has_url = true;
		}
		else if (strcmp(key, "reconcile_url") == 0)
		{
			t->reconcile_url = tg_url(&v, key, &t->reconcile_host);
		}
		else if (strcmp(key, "method") == 0)
		{
			char	   *m = tg_string(&v, key);

			if (strcmp(m, "PUT") == 0)
				t->put = true;
			else if (strcmp(m, "POST") != 0)
				tg_error("\"method\" must be \"POST\" or \"PUT\"", NULL);
		}
		else if (strcmp(key, "timeout_ms") == 0)
			t->timeout_ms = tg_int(&v, key, 1, 600000);
		else if (strcmp(key, "max_inflight") == 0)
			t->max_inflight = tg_int(&v, key, 1, 1000);
		else if (strcmp(key, "keep_alive") == 0)
			t->keep_alive = tg_bool(&v, key);
		else if (strcmp(key, "headers") == 0)
		{
			JsonbIterator *hit;
			JsonbValue	hk,
						hv;
			int			cap = 8;

			if (v.type != jbvBinary || !JsonContainerIsObject(v.val.binary.data))
				tg_error("\"headers\" must be an object of strings", NULL);
			t->headers = palloc(sizeof(char *) * cap);
			hit = JsonbIteratorInit(v.val.binary.data);
			(void) JsonbIteratorNext(&hit, &hv, true);
			while (JsonbIteratorNext(&hit, &hk, true) == WJB_KEY)
			{
				char	   *name = pnstrdup(hk.val.string.val, hk.val.string.len);

				(void) JsonbIteratorNext(&hit, &hv, true);
				if (!ntask_header_name_ok(name, strlen(name)))
					tg_error("a header name is not an HTTP token", NULL);
				if (ntask_header_reserved(name, strlen(name)))
					tg_error(psprintf("header \"%s\" is set by ntask", name),
							 "ntask sends Idempotency-Key, NTask-Attempt and NTask-Task-Id itself and manages Host, Content-Length, Transfer-Encoding, Connection and Expect.");
				if (hv.type != jbvString)
					tg_error(psprintf("the value of header \"%s\" must be a string", name), NULL);
				if (memchr(hv.val.string.val, '\0', hv.val.string.len) != NULL ||
					!ntask_header_value_ok(hv.val.string.val, hv.val.string.len))
					tg_error(psprintf("the value of header \"%s\" contains a control character or is too long", name),
							 "CR, LF, NUL and other control characters but tab are not allowed; at most 8192 bytes.");
				if (pg_strcasecmp(name, "content-type") == 0)
					t->has_content_type = true;
				if (t->nheaders == 100)
					tg_error("more than 100 headers", NULL);
				if (t->nheaders == cap)
				{
					cap *= 2;
					t->headers = repalloc(t->headers, sizeof(char *) * cap);
				}
				t->headers[t->nheaders++] =
					psprintf("%s: %.*s", name, (int) hv.val.string.len, hv.val.string.val);
			}
		}
		else
			tg_error(psprintf("unknown key \"%s\"", key),
					 "Known keys: type, url, method, timeout_ms, headers, reconcile_url, max_inflight, keep_alive.");
	}
	if (!has_url)
		tg_error("\"url\" is required", NULL);
	return t;
}
