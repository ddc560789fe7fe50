/*-------------------------------------------------------------------------
 *
 * digest.c
 *	  Canonical jsonb digests, versioned.
 *
 * Version 1: SHA-256 (OpenSSL's EVP, see digest_sha256) over a canonical text form of the
 * jsonb value: no whitespace; object keys in jsonb's storage order (by
 * byte length, then bytes, duplicates already removed), which is the same
 * for any two equal jsonb values however the input was written; strings
 * escaped as jsonb prints them; numbers normalised with numeric_normalize
 * (so 1.0 and 1.00 digest alike, as they compare equal in jsonb).
 *
 * The version is stored beside every digest.  A digest of a version this
 * build does not know fails closed (SQLSTATE NT004) rather than comparing
 * apples with pears.
 *
 * Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
 *
 * IDENTIFICATION
 *	  src/digest.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "ntask_base.h"

#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/numeric.h"

#include <openssl/evp.h>

PG_FUNCTION_INFO_V1(ntask_digest);

static void digest_scalar(StringInfo buf, JsonbValue *v);
static void digest_canonical(StringInfo buf, Jsonb *jb);

/* digest_scalar: append the canonical text of one scalar. */
static void
digest_scalar(StringInfo buf, JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			appendStringInfoString(buf, "null");
			break;
		case jbvBool:
			appendStringInfoString(buf, v->val.boolean ? "true" : "false");
			break;
		case jbvNumeric:
			appendStringInfoString(buf, numeric_normalize(v->val.numeric));
			break;
		case jbvString:
			escape_json(buf, pnstrdup(v->val.string.val, v->val.string.len));
			break;
		default:
			elog(ERROR, "ntask: unexpected jsonb value type %d", (int) v->type);
	}
}

/*
 * digest_canonical
 *		Append the version-1 canonical form of jb to buf.
 */
static void
digest_canonical(StringInfo buf, Jsonb *jb)
{
	JsonbIterator *it = JsonbIteratorInit(&jb->root);
	JsonbValue	v;
	JsonbIteratorToken tok;
	bool		first = true;	/* first item in the current container */

	while ((tok = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		switch (tok)
		{
			case WJB_BEGIN_ARRAY:
				if (v.val.array.rawScalar)
					break;		/* a bare scalar at the root */
				if (!first)
					appendStringInfoChar(buf, ',');
				appendStringInfoChar(buf, '[');
				first = true;
				break;
			case WJB_BEGIN_OBJECT:
				if (!first)
					appendStringInfoChar(buf, ',');
				appendStringInfoChar(buf, '{');
				first = true;
				break;
			case WJB_END_ARRAY:
				if (!JB_ROOT_IS_SCALAR(jb))
					appendStringInfoChar(buf, ']');
				first = false;
				break;
			case WJB_END_OBJECT:
				appendStringInfoChar(buf, '}');
				first = false;
				break;
			case WJB_KEY:
				if (!first)
					appendStringInfoChar(buf, ',');
				digest_scalar(buf, &v);
				appendStringInfoChar(buf, ':');
				first = true;	/* the value follows without a comma */
				break;
			case WJB_VALUE:
			case WJB_ELEM:
				if (!first)
					appendStringInfoChar(buf, ',');
				digest_scalar(buf, &v);
				first = false;
				break;
			default:
				elog(ERROR, "ntask: unexpected jsonb iterator token %d", (int) tok);
		}
	}
}

/*
 * digest_sha256
 *		The SHA-256 of len bytes at data into out (NTASK_DIGEST_LEN bytes).
 *
 * By OpenSSL's EVP interface, the algorithm fetched once per backend and
 * one context reused (each init resets it): pg_cryptohash allocates a
 * context per digest, registers it with the resource owner and, under
 * OpenSSL 3, fetches the algorithm's implementation anew at every init,
 * which was 4% of an enqueue's backend CPU (docs/performance.md "The
 * enqueue's statement and call, made cheaper").  ntask links libcrypto
 * (libcurl's, with libpq-dev's headers), as PostgreSQL built with OpenSSL
 * does.
 */
static void
digest_sha256(const char *data, size_t len, uint8 *out)
{
	static const EVP_MD *md = NULL;
	static EVP_MD_CTX *ctx = NULL;
	unsigned int outlen = 0;

	if (md == NULL)
	{
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
		md = EVP_MD_fetch(NULL, "SHA256", NULL);
#else
		md = EVP_sha256();
#endif
		if (md == NULL)
			elog(ERROR, "ntask: could not load SHA-256 from OpenSSL");
	}
	if (ctx == NULL)
	{
		ctx = EVP_MD_CTX_new();
		if (ctx == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory")));
	}
	if (EVP_DigestInit_ex(ctx, md, NULL) != 1 ||
		EVP_DigestUpdate(ctx, data, len) != 1 ||
		EVP_DigestFinal_ex(ctx, out, &outlen) != 1 ||
		outlen != NTASK_DIGEST_LEN)
		elog(ERROR, "ntask: could not compute SHA-256 digest");
}

/*
 * NtaskDigest
 *		The digest of jb under the given algorithm version, as a palloc'd
 *		bytea in the current memory context.  Unknown versions raise NT004.
 */
bytea *
NtaskDigest(Jsonb *jb, int version)
{
	StringInfoData buf;
	bytea	   *result;

	if (version != NTASK_DIGEST_VERSION)
		ereport(ERROR,
				(errcode(ERRCODE_NTASK_DIGEST_VERSION),
				 errmsg("ntask: unsupported digest version %d", version),
				 errdetail("This build of ntask knows digest version %d only.",
						   NTASK_DIGEST_VERSION)));

	initStringInfo(&buf);
	digest_canonical(&buf, jb);

	result = palloc(VARHDRSZ + NTASK_DIGEST_LEN);
	SET_VARSIZE(result, VARHDRSZ + NTASK_DIGEST_LEN);
	digest_sha256(buf.data, buf.len, (uint8 *) VARDATA(result));
	pfree(buf.data);
	return result;
}

/*
 * ntask_digest(payload jsonb, version int DEFAULT 1) RETURNS bytea
 *		SQL access to NtaskDigest, for callers that want to store or compare
 *		digests themselves.
 */
Datum
ntask_digest(PG_FUNCTION_ARGS)
{
	Jsonb	   *jb = PG_GETARG_JSONB_P(0);
	int32		version = PG_GETARG_INT32(1);

	PG_RETURN_BYTEA_P(NtaskDigest(jb, version));
}
