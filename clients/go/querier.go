package ntask

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgproto3/v2"
	"github.com/jackc/pgx/v4"
)

// Querier is the caller's connection or transaction. pgx's *pgx.Conn,
// pgx.Tx, *pgxpool.Pool, *pgxpool.Conn (and their transactions) satisfy it;
// database/sql's *sql.DB, *sql.Tx and *sql.Conn are wrapped with SQL.
type Querier interface {
	Query(ctx context.Context, sql string, args ...interface{}) (pgx.Rows, error)
}

// SQLQuerier is what database/sql's *sql.DB, *sql.Tx and *sql.Conn have.
type SQLQuerier interface {
	QueryContext(ctx context.Context, query string, args ...interface{}) (*sql.Rows, error)
}

// SQL wraps a database/sql handle (any driver: lib/pq, pgx's stdlib) as a
// Querier for the producer functions and Task.Receipt. The library's
// statements pass every argument as a string, an int64, a bool or nil, so
// any driver binds them.
func SQL(q SQLQuerier) Querier { return sqlQuerier{q} }

type sqlQuerier struct{ q SQLQuerier }

func (s sqlQuerier) Query(ctx context.Context, query string, args ...interface{}) (pgx.Rows, error) {
	r, err := s.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return &sqlRows{r: r}, nil
}

// sqlRows gives database/sql's rows the part of pgx.Rows the library uses
// (Next, Scan, Err, Close, Values); CommandTag, FieldDescriptions and
// RawValues have no database/sql counterpart and answer nil.
type sqlRows struct {
	r   *sql.Rows
	err error
}

func (s *sqlRows) Close() { s.r.Close() }
func (s *sqlRows) Err() error {
	if s.err != nil {
		return s.err
	}
	return s.r.Err()
}
func (s *sqlRows) CommandTag() pgconn.CommandTag                  { return nil }
func (s *sqlRows) FieldDescriptions() []pgproto3.FieldDescription { return nil }
func (s *sqlRows) Next() bool                                     { return s.r.Next() }
func (s *sqlRows) Scan(dest ...interface{}) error {
	err := s.r.Scan(dest...)
	if err != nil {
		s.err = err
	}
	return err
}
func (s *sqlRows) Values() ([]interface{}, error) {
	cols, err := s.r.Columns()
	if err != nil {
		return nil, err
	}
	vals := make([]interface{}, len(cols))
	ptrs := make([]interface{}, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	return vals, s.r.Scan(ptrs...)
}
func (s *sqlRows) RawValues() [][]byte { return nil }

// ---- argument encoding: every argument is text, bigint, boolean or NULL,
// cast in the statement, so the simple and the extended protocol and every
// database/sql driver agree.

// jsonArg encodes a value as JSON text for a $n::jsonb parameter; nil stays
// SQL NULL only where nullNil says so, else it is JSON null. A
// json.RawMessage or []byte is taken as JSON text as it is.
func jsonArg(v interface{}, nullNil bool) (interface{}, error) {
	switch x := v.(type) {
	case nil:
		if nullNil {
			return nil, nil
		}
		return "null", nil
	case json.RawMessage:
		if x == nil && nullNil {
			return nil, nil
		}
		if !json.Valid(x) {
			return nil, fmt.Errorf("ntask: invalid JSON")
		}
		return string(x), nil
	case []byte:
		if x == nil && nullNil {
			return nil, nil
		}
		if !json.Valid(x) {
			return nil, fmt.Errorf("ntask: invalid JSON")
		}
		return string(x), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("ntask: encoding JSON: %w", err)
	}
	return string(b), nil
}

// textArrayArg encodes a []string as a JSON array for
// ntaskTextArray($n); nil is NULL.
func textArrayArg(a []string) interface{} {
	if a == nil {
		return nil
	}
	b, _ := json.Marshal(a)
	return string(b)
}

// nullableTextArrayArg: a list whose elements may be NULL.
func nullableTextArrayArg(a []*string) interface{} {
	if a == nil {
		return nil
	}
	b, _ := json.Marshal(a)
	return string(b)
}

// timeArg: a timestamptz as RFC 3339 text; the zero time is NULL.
func timeArg(t time.Time) interface{} {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// intervalArg: a duration in microseconds for $n::bigint * interval
// '1 microsecond'; a zero or negative duration is NULL (the default).
func intervalArg(d time.Duration) interface{} {
	if d <= 0 {
		return nil
	}
	return int64(d / time.Microsecond)
}

// strArg: "" is NULL.
func strArg(s string) interface{} {
	if s == "" {
		return nil
	}
	return s
}

// The SQL fragments that turn the encoded arguments back into PostgreSQL
// values.
func sqlTextArray(n int) string {
	return fmt.Sprintf("(SELECT array_agg(e ORDER BY o) FROM jsonb_array_elements_text($%d::text::jsonb) WITH ORDINALITY x(e, o))", n)
}
func sqlJSONArray(n int) string {
	return fmt.Sprintf("(SELECT array_agg(e ORDER BY o) FROM jsonb_array_elements($%d::text::jsonb) WITH ORDINALITY x(e, o))", n)
}
func sqlInterval(n int) string {
	return fmt.Sprintf("($%d::bigint * interval '1 microsecond')", n)
}
