# ntask: PGXS build, tests and helpers.  See README.md.

EXTENSION = ntask
MODULE_big = ntask
OBJS = \
	src/module.o \
	src/spi_util.o \
	src/shard.o \
	src/digest.o \
	src/rights.o \
	src/queue.o \
	src/guard.o \
	src/enqueue.o \
	src/fair.o \
	src/limit.o \
	src/claim.o \
	src/claim_lock.o \
	src/delegate.o \
	src/coord.o \
	src/attempt.o \
	src/context.o \
	src/lease.o \
	src/transition.o \
	src/repair.o \
	src/receipt.o \
	src/fence.o \
	src/cron.o \
	src/cron_parse.o \
	src/drop.o \
	src/http_parse.o \
	src/target.o \
	src/housekeeping.o \
	src/worker_shared.o \
	src/waiter.o \
	src/wait.o \
	src/result.o \
	src/deps.o \
	src/saga.o \
	src/breaker.o \
	src/dispatch.o \
	src/worker.o \
	src/checkpoint.o \
	src/signal.o
# the install script and the one upgrade path, 0.3 -> 1.0.0 -> 1.1.0
# (test/frozen/ntask--0.3.sql and ntask--1.0.0.sql, its starts, are
# installed only while scripts/test.sh runs)
DATA = ntask--1.1.0.sql ntask--0.3--1.0.0.sql ntask--1.0.0--1.1.0.sql
PGFILEDESC = "ntask - durable tasks with leases and fencing tokens"

PG_CPPFLAGS = -I$(srcdir)/src -std=c11
SHLIB_LINK = -lcurl -lcrypto


REGRESS = setup enqueue claim fairness flow transition budget replay_cancel release batch result wait saga guard errors stats receipt distribute \
	cron schedule housekeeping http_target breaker privileges explain metrics upgrade \
	bulk progress trace \
	pause \
	aging \
	workflow \
	deps \
	deps_cascade \
	context_bound \
	await_deadline \
	first_hour3 \
	tokens \
	attempt_row \
	upgrade_bound \
	takeover_order \
	transition_split \
	transition_settings
REGRESS_OPTS = --temp-instance=./tmp_check_regress --temp-config=$(srcdir)/test/ntask.conf

ISOLATION = takeover_w1_w2 claim_skip_locked enqueue_same_key cancel_vs_transition \
	receipt_lost_response_same_token receipt_same_token_different_content \
	receipt_stale_after_takeover receipt_vs_cancel fence_v2_after_v3 fence_reverse_delivery \
	schedule_fire_same_slot transition_many_vs_takeover transition_and_claim_takeover \
	transition_many_lock_order receipt_second_token_after_commit claim_wait_woken_by_enqueue \
	claim_wait_two_waiters notify_at_commit saga_step_vs_cancel saga_stale_step_worker \
	saga_double_start saga_compensated_vs_cancel fair_concurrent_turns partition_inflight_limit ordered_key_one_in_flight \
	ordered_takeover rate_limit_concurrent ordered_switch_vs_enqueue notify_mixed_case \
	claim_locks_unreachable claim_wait_limited claim_repeatable_read \
	bulk_cancel_vs_transition \
	pause_vs_claim \
	aging_vs_claim \
	checkpoint_stale_after_takeover signal_vs_await await_timeout \
	deps_fan_in_concurrent deps_stale_parent_worker deps_cancel_vs_success \
	ordered_waiting_head deps_producer_open \
	claim_wait_woken_by_queue_set \
	claim_fused_skip_locked
ISOLATION_OPTS = --temp-instance=./tmp_check_iso --temp-config=$(srcdir)/test/ntask.conf

TAP_TESTS = 1

EXTRA_CLEAN = output_iso results tmp_check tmp_check_regress tmp_check_iso \
	regression.diffs regression.out log

override autodepend = yes

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# A header change (a struct, an enum) must rebuild the objects that include
# it, or a stale object crashes the backend: the compiler writes each
# object's includes to .deps/ (PGXS's autodepend, on here whatever
# PostgreSQL was configured with), so a change of a header of src/
# rebuilds only the objects that include it.

.PHONY: demo test dist indent typedefs
demo:
	sh $(srcdir)/scripts/demo.sh
test:
	sh $(srcdir)/scripts/test.sh

# format src/ with pgindent's settings and typedefs.list (pgindent when it
# is in PATH, else Debian's pg_bsd_indent); INDENT=--diff or --check only
# shows what would change.  typedefs regenerates typedefs.list.
indent:
	sh $(srcdir)/scripts/indent.sh $(INDENT)
typedefs:
	PG_CONFIG=$(PG_CONFIG) sh $(srcdir)/scripts/typedefs.sh

# a PGXN-ready archive of HEAD: ntask-<version>.zip with everything under
# ntask-<version>/ (META.json at its top), as `pgxn bundle` makes it
DIST_VERSION := $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" $(srcdir)/ntask.control)
dist:
	git -C $(srcdir) archive --format=zip --prefix=ntask-$(DIST_VERSION)/ \
		-o $(CURDIR)/ntask-$(DIST_VERSION).zip HEAD

