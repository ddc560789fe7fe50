/*-------------------------------------------------------------------------
 *
 * fuzz_common.h
 *	  Shared by the libFuzzer harnesses in fuzz/: a property check that
 *	  aborts (libFuzzer reports the input as a crash) and small helpers.
 *
 * IDENTIFICATION
 *	  fuzz/fuzz_common.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NTASK_FUZZ_COMMON_H
#define NTASK_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* FUZZ_CHECK(cond): a property that must hold for every input */
#define FUZZ_CHECK(cond) \
	do { \
		if (!(cond)) \
		{ \
			fprintf(stderr, "property failed: %s (%s:%d)\n", #cond, \
					__FILE__, __LINE__); \
			abort(); \
		} \
	} while (0)

/* fuzz_dup: an exact-size heap copy of data[0..len) (ASan sees over-reads);
 * never NULL, even for len 0 */
static inline char *
fuzz_dup(const void *data, size_t len)
{
	char	   *p = malloc(len > 0 ? len : 1);

	FUZZ_CHECK(p != NULL);
	if (len > 0)
		memcpy(p, data, len);
	return p;
}

/* fuzz_cstr: a NUL-terminated heap copy of data[0..len) */
static inline char *
fuzz_cstr(const void *data, size_t len)
{
	char	   *p = malloc(len + 1);

	FUZZ_CHECK(p != NULL);
	if (len > 0)
		memcpy(p, data, len);
	p[len] = '\0';
	return p;
}

static inline int
fuzz_lower(int c)
{
	return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c;
}

static inline int
fuzz_upper(int c)
{
	return (c >= 'a' && c <= 'z') ? c - 'a' + 'A' : c;
}

#endif							/* NTASK_FUZZ_COMMON_H */
