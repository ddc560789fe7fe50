// An ntask worker in Java (JDBC, Debian libpostgresql-jdbc-java).
//
//   javac Worker.java
//   java -cp .:/usr/share/java/postgresql.jar Worker \
//        "jdbc:postgresql://127.0.0.1/app?user=app_jobs&prepareThreshold=0" W-java-1 [queue]
//
// The loop (docs/guide.md "Using ntask from Python / Node / Java"):
//   1. claim one task in its own short transaction (autocommit);
//   2. prior_outcome 'committed': an earlier attempt committed the business
//      write, only report success; 'unknown': an earlier attempt may have
//      called out, so ask the provider (by task key) before calling again;
//   3. ntask_invoked just before the call ('stale': do not call);
//   4. the call, heartbeating while it runs long;
//   5. the business write and ntask_receipt in ONE transaction;
//   6. ntask_transition with the error class that says what is known:
//      transient (it did not take effect), permanent (never will),
//      unknown (it may have: a timeout after sending).
// SIGTERM runs the shutdown hook, which asks the loop to stop and waits for
// it: a task claimed and not yet invoked is handed back (ntask_release),
// one being worked is finished, then the JVM exits (with status 143, as
// after any SIGTERM that shutdown hooks handled).
//
// The "provider" is the table example_provider (examples/schema.sql); the
// payload's "kind" says how it answers (see examples/python/worker.py).
// Replace callProvider() with your own call.  prepareThreshold=0 keeps
// pgJDBC on unnamed statements (safe behind pgbouncer in transaction mode).

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Types;

public final class Worker {
    private static final String LEASE = "5 seconds";
    private static volatile boolean stopping = false;

    /** What is known about the call's effect when it did not succeed. */
    static final class Outcome extends Exception {
        final String errorClass;
        final String detail;

        Outcome(String errorClass, String detail) {
            super(errorClass);
            this.errorClass = errorClass;
            this.detail = detail;
        }
    }

    /** The task moved on without us (taken over, canceled). */
    static final class Lost extends Exception {
    }

    record Task(long id, String key, String payload, int attempt, long token,
                String prior, String worker) {
        String kind() {
            // the payload is {"kind": "..."}; a real worker parses it with its JSON library
            int i = payload.indexOf("\"kind\"");
            if (i < 0) return "ok";
            int a = payload.indexOf('"', payload.indexOf(':', i) + 1);
            return payload.substring(a + 1, payload.indexOf('"', a + 1));
        }
    }

    private final Connection db;

    Worker(Connection db) {
        this.db = db;
    }

    private String one(String sql, Object... args) throws SQLException {
        try (PreparedStatement st = db.prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++) {
                if (args[i] == null) st.setNull(i + 1, Types.VARCHAR);
                else st.setObject(i + 1, args[i]);
            }
            try (ResultSet rs = st.executeQuery()) {
                return rs.next() ? rs.getString(1) : null;
            }
        }
    }

    private Long providerLookup(String key) throws SQLException {
        String t = one("SELECT token FROM example_provider WHERE task_key = ?", key);
        return t == null ? null : Long.valueOf(t);
    }

    private Long callProvider(Task t) throws SQLException, Outcome, Lost, InterruptedException {
        String kind = t.kind();
        if (kind.equals("transient") && t.attempt() == 1) throw new Outcome("transient", "{\"http_status\": 503}");
        if (kind.equals("permanent")) throw new Outcome("permanent", "{\"http_status\": 400}");
        if (kind.equals("slow")) {
            for (int i = 0; i < 6; i++) {
                Thread.sleep(1000);
                if (one("SELECT ntask_heartbeat(?, ?)", t.id(), t.token()) == null) throw new Lost();
            }
        }
        try (PreparedStatement st = db.prepareStatement(
                "INSERT INTO example_provider (task_key, task_id, token, worker) VALUES (?, ?, ?, ?) "
                + "ON CONFLICT (task_key) DO UPDATE SET calls = example_provider.calls + 1")) {
            st.setString(1, t.key());
            st.setLong(2, t.id());
            st.setLong(3, t.token());
            st.setString(4, t.worker());
            st.executeUpdate();
        }
        if (kind.equals("unknown") && t.attempt() == 1) throw new Outcome("unknown", "{\"timeout_ms\": 5000}");
        return providerLookup(t.key());
    }

    private String transition(Task t, String toState, String errorClass, String detail,
                              String outcome, String errorStage) throws SQLException {
        String r = one("SELECT result FROM ntask_transition(?, ?, ?, ?, ?::jsonb, outcome => ?, error_stage => ?)",
                t.id(), t.token(), toState, errorClass, detail, outcome, errorStage);
        if (!r.equals("applied") && !r.equals("duplicate"))
            System.err.println(t.worker() + ": transition of " + t.id() + " answered " + r);
        return r;
    }

    String work(Task t) throws SQLException, Lost, InterruptedException {
        if ("committed".equals(t.prior()))
            return transition(t, "succeeded", null, null, "already_committed", null);
        Long effect = null;
        if ("unknown".equals(t.prior())) effect = providerLookup(t.key());
        if (effect == null) {
            if ("stale".equals(one("SELECT ntask_invoked(?, ?)", t.id(), t.token()))) return "stale";
            try {
                effect = callProvider(t);
            } catch (Outcome o) {
                if (o.errorClass.equals("permanent"))
                    return transition(t, "repair_required", "permanent", o.detail, null, null);
                return transition(t, "retry_wait", o.errorClass, o.detail, null,
                        o.errorClass.equals("unknown") ? "response_lost" : null);
            }
        }

        // the business write, exactly once per task, with its receipt
        String receipt;
        db.setAutoCommit(false);
        try {
            receipt = one("SELECT ntask_receipt(?, ?, ?::jsonb)", t.id(), t.token(),
                    "{\"provider_token\": " + effect + "}");
            if (receipt.equals("applied")) {
                try (PreparedStatement st = db.prepareStatement(
                        "INSERT INTO example_business (task_id, token, worker, provider_token) VALUES (?, ?, ?, ?)")) {
                    st.setLong(1, t.id());
                    st.setLong(2, t.token());
                    st.setString(3, t.worker());
                    st.setLong(4, effect);
                    st.executeUpdate();
                }
            }
            db.commit();
        } catch (SQLException e) {
            db.rollback();
            throw e;
        } finally {
            db.setAutoCommit(true);
        }
        if (receipt.equals("stale")) return "stale";
        if (receipt.equals("conflict"))
            return transition(t, "repair_required", "permanent", "{\"reason\": \"receipt conflict\"}", null, null);
        return transition(t, "succeeded", null, null, "business_committed", null);
    }

    public static void main(String[] args) throws Exception {
        String url = args[0], worker = args[1], queue = args.length > 2 ? args[2] : "examples";
        Thread main = Thread.currentThread();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping = true;
            try {
                main.join(30000);
            } catch (InterruptedException ignored) {
            }
        }));
        int done = 0;
        try (Connection db = DriverManager.getConnection(url)) {
            db.setAutoCommit(true);
            Worker w = new Worker(db);
            while (!stopping) {
                Task t = null;
                try (PreparedStatement st = db.prepareStatement(
                        "SELECT task_id, task_key, payload::text, attempt, token, prior_outcome "
                        + "FROM ntask_claim(?, ?, 1, ?::interval)")) {
                    st.setString(1, queue);
                    st.setString(2, worker);
                    st.setString(3, LEASE);
                    try (ResultSet rs = st.executeQuery()) {
                        if (rs.next())
                            t = new Task(rs.getLong(1), rs.getString(2), rs.getString(3), rs.getInt(4),
                                    rs.getLong(5), rs.getString(6), worker);
                    }
                }
                if (t == null) {
                    Thread.sleep(50);
                    continue;
                }
                if (stopping) {
                    // claimed, not started: hand it back (never invoked: no attempt spent)
                    w.one("SELECT ntask_release(?, ?)", t.id(), t.token());
                    break;
                }
                try {
                    w.work(t);
                } catch (Lost ignored) {
                }
                done++;
            }
        }
        System.err.println(worker + ": " + done + " tasks, stopped");
    }
}
