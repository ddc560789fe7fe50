package ntask

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4/pgxpool"
)

// Unit tests: no server.

func TestUnitClassify(t *testing.T) {
	at := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	cases := []struct {
		name    string
		res     Result
		err     error
		invoked bool
		want    report
	}{
		{"plain success", Result{}, nil, true, report{toState: "succeeded"}},
		{"success with outcome", Success("sent", 7), nil, false, report{toState: "succeeded", outcome: "sent", value: 7}},
		{"transient", Result{}, Transient("503", at), true, report{toState: "retry_wait", class: ClassTransient, message: "503", retryAt: at}},
		{"wrapped permanent", Result{}, fmt.Errorf("ctx: %w", Permanent("400")), true, report{toState: "repair_required", class: ClassPermanent, message: "400"}},
		{"unknown", Result{}, Unknown("timeout"), false, report{toState: "retry_wait", class: ClassUnknown, message: "timeout"}},
		{"other error before invoked", Result{}, errors.New("boom"), false, report{toState: "retry_wait", class: ClassTransient, message: "boom"}},
		{"other error after invoked", Result{}, errors.New("boom"), true, report{toState: "retry_wait", class: ClassUnknown, message: "boom"}},
		{"awaiting", Result{}, Awaiting, true, report{none: true}},
		{"lost", Result{}, fmt.Errorf("x: %w", ErrLost), true, report{none: true}},
	}
	for _, c := range cases {
		got := classify(c.res, c.err, c.invoked)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestUnitOptionsDefaults(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.Concurrency != 4 || o.Wait != 10*time.Second || o.ShutdownGrace != 30*time.Second ||
		o.Invoked != "auto" || o.Lease != 0 || o.HeartbeatEvery != 0 || o.Logger == nil {
		t.Errorf("defaults: %+v", o)
	}
	host, _ := os.Hostname()
	if !regexp.MustCompile("^" + regexp.QuoteMeta(host) + fmt.Sprintf("-%d-[0-9a-f]{8}$", os.Getpid())).MatchString(o.Name) {
		t.Errorf("default name %q is not host-pid-random", o.Name)
	}
	o2, _ := Options{}.withDefaults()
	if o2.Name == o.Name {
		t.Errorf("two default names are equal: %q", o.Name)
	}
	o, _ = Options{Lease: 90 * time.Second}.withDefaults()
	if o.HeartbeatEvery != 30*time.Second {
		t.Errorf("heartbeat_every is not lease/3: %s", o.HeartbeatEvery)
	}
	for _, bad := range []Options{{Wait: 31 * time.Second}, {Concurrency: -1}, {Invoked: "sometimes"}, {Lease: -time.Second}} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

func TestUnitContextDecode(t *testing.T) {
	c, err := decodeContext([]byte(`{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"parents": {"fetch:t1": {"rows": 3}, "fetch:t2": null}, "checkpoints": {"s1": 1},
		"signal": {"key": "pay:1", "payload": {"ok": true}}, "later": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Traceparent != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" ||
		string(c.Parents["fetch:t1"]) != `{"rows": 3}` || string(c.Parents["fetch:t2"]) != "null" ||
		string(c.Checkpoints["s1"]) != "1" || c.Signal == nil || c.Signal.Key != "pay:1" ||
		string(c.Signal.Payload) != `{"ok": true}` || c.Signal.TimedOut || !strings.Contains(string(c.Raw), `"later"`) {
		t.Errorf("decoded: %+v", c)
	}
	c, err = decodeContext([]byte(`{"signal": {"key": "k", "timed_out": true}}`))
	if err != nil || !c.Signal.TimedOut {
		t.Errorf("timed out signal: %+v %v", c, err)
	}
	c, err = decodeContext(nil)
	if err != nil || c.Raw != nil || c.Signal != nil {
		t.Errorf("NULL context: %+v %v", c, err)
	}
}

func TestUnitArguments(t *testing.T) {
	if v, _ := jsonArg(nil, true); v != nil {
		t.Errorf("nil with nullNil: %v", v)
	}
	if v, _ := jsonArg(nil, false); v != "null" {
		t.Errorf("nil as JSON: %v", v)
	}
	if v, _ := jsonArg(json.RawMessage(`{"a": 1}`), false); v != `{"a": 1}` {
		t.Errorf("raw: %v", v)
	}
	if _, err := jsonArg(json.RawMessage(`{"a"`), false); err == nil {
		t.Errorf("invalid raw JSON accepted")
	}
	if v, _ := jsonArg(map[string]int{"n": 1}, false); v != `{"n":1}` {
		t.Errorf("map: %v", v)
	}
	if _, err := jsonArg(func() {}, false); err == nil {
		t.Errorf("a func marshalled")
	}
	if intervalArg(0) != nil || intervalArg(1500*time.Millisecond) != int64(1500000) {
		t.Errorf("intervalArg")
	}
	if timeArg(time.Time{}) != nil || timeArg(time.Date(2026, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600))) != "2026-01-02T02:04:05.000006Z" {
		t.Errorf("timeArg: %v", timeArg(time.Date(2026, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600))))
	}
	if textArrayArg(nil) != nil || textArrayArg([]string{"a", `b"c`}) != `["a","b\"c"]` {
		t.Errorf("textArrayArg")
	}
	x := "p"
	if nullableTextArrayArg([]*string{nil, &x}) != `[null,"p"]` {
		t.Errorf("nullableTextArrayArg")
	}
}

func TestUnitServerAnswer(t *testing.T) {
	if !isServerAnswer(fmt.Errorf("w: %w", &pgconn.PgError{Code: "22023"})) {
		t.Errorf("22023 is an answer")
	}
	for _, c := range []string{"57P01", "08006", "53300"} {
		if isServerAnswer(&pgconn.PgError{Code: c}) {
			t.Errorf("%s is a lost connection, to retry", c)
		}
	}
	if isServerAnswer(errors.New("unexpected EOF")) {
		t.Errorf("a transport error is not an answer")
	}
}

// The SQL the package sends calls only the functions of SQLFunctions, in
// named notation with only their listed arguments, and uses every entry
// (the integration drift test checks SQLFunctions against pg_proc).
func TestUnitDriftTable(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	call := regexp.MustCompile(`(ntask_[a-z_]+)\(`)
	named := regexp.MustCompile(`([a-z_]+) =>`)
	used := map[string]map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		for _, m := range call.FindAllStringSubmatchIndex(src, -1) {
			fn := src[m[2]:m[3]]
			// the call's text: to the closing parenthesis at depth 0
			depth, end := 0, m[1]-1
			for i := m[1] - 1; i < len(src); i++ {
				if src[i] == '(' {
					depth++
				} else if src[i] == ')' {
					depth--
					if depth == 0 {
						end = i
						break
					}
				}
			}
			if used[fn] == nil {
				used[fn] = map[string]bool{}
			}
			// only the top level of the call's arguments
			body := src[m[1]:end]
			var top strings.Builder
			d := 0
			for _, r := range body {
				if r == '(' {
					d++
				} else if r == ')' {
					d--
				} else if d == 0 {
					top.WriteRune(r)
				}
			}
			for _, a := range named.FindAllStringSubmatch(top.String(), -1) {
				used[fn][a[1]] = true
			}
		}
	}
	for fn, args := range used {
		listed, ok := SQLFunctions[fn]
		if !ok {
			t.Errorf("%s is called but not in SQLFunctions", fn)
			continue
		}
		for a := range args {
			found := false
			for _, l := range listed {
				found = found || l == a
			}
			if !found {
				t.Errorf("%s(%s =>) is called but not listed", fn, a)
			}
		}
	}
	var missing []string
	for fn, args := range SQLFunctions {
		for _, a := range args {
			if !used[fn][a] {
				missing = append(missing, fn+"."+a)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("listed but never passed: %v", missing)
	}
}

// A worker whose server is unreachable backs off its claims and still
// stops: gracefully on the first Stop, at once on the second.
func TestUnitStopWithoutServer(t *testing.T) {
	cfg, err := pgxpool.ParseConfig("host=127.0.0.1 port=1 user=x dbname=x connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	cfg.LazyConnect = true
	pool, err := pgxpool.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var logs []string
	var mu sync.Mutex
	w, err := NewWorker(pool, "q", func(context.Context, *Task) (Result, error) { return Result{}, nil },
		Options{Logger: logFunc(func(s string) { mu.Lock(); logs = append(logs, s); mu.Unlock() })})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	time.Sleep(300 * time.Millisecond)
	w.Stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("graceful stop: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after Stop")
	}
	if st := w.Stats(); st.Claimed != 0 {
		t.Errorf("stats: %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logs) == 0 || !strings.Contains(logs[0], "claim failed") {
		t.Errorf("the failed claim was not logged: %v", logs)
	}
}

type logFunc func(string)

func (f logFunc) Printf(format string, args ...interface{}) { f(fmt.Sprintf(format, args...)) }

// Connect's pool: the simple protocol (pgbouncer in transaction mode), 8
// connections unless the DSN says pool_max_conns.
func TestUnitPoolConfig(t *testing.T) {
	for _, c := range []struct {
		dsn  string
		want int32
	}{
		{"host=127.0.0.1 dbname=x", 8},
		{"host=127.0.0.1 dbname=x pool_max_conns=3", 3},
		{"postgres://u@127.0.0.1/x?pool_max_conns=20", 20},
	} {
		cfg, err := poolConfig(c.dsn)
		if err != nil {
			t.Fatal(err)
		}
		if !cfg.ConnConfig.PreferSimpleProtocol || cfg.MaxConns != c.want {
			t.Errorf("%s: simple %v, max conns %d", c.dsn, cfg.ConnConfig.PreferSimpleProtocol, cfg.MaxConns)
		}
	}
}
