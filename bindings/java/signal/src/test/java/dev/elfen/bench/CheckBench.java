package dev.elfen.bench;

import dev.elfen.BatchOptions;
import dev.elfen.BatchThread;
import dev.elfen.ElfenException;
import dev.elfen.Page;
import dev.elfen.PageSpec;
import dev.elfen.policy.PolicyKind;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/**
 * The cost of {@link BatchThread#check()} on an idle request lane (the fast
 * path), hand-rolled: no JMH, so it runs from the test classpath with nothing
 * but the JDK.
 *
 * <p>Method. A page with one request lane (cpu 0) and one batch lane (cpu 1)
 * in a temporary directory; a batch thread attached to the batch lane (pinned
 * to its CPU when the machine has it, else not) whose first check has run, so
 * every later check is the fast path. Three loops, each its own method so the
 * JIT compiles each alone:
 *
 * <ul>
 *   <li>{@code check}: {@code n} calls of {@code check()}: ns per iteration
 *       is the check plus the loop's increment and branch;
 *   <li>{@code work}: {@code n} steps of xorshift64 (a dependent chain of six
 *       shifts and xors, the "batch work" stand-in);
 *   <li>{@code work+check}: the same step plus a {@code check()} per
 *       iteration; minus {@code work} gives what instrumenting such a loop
 *       costs.
 * </ul>
 *
 * Warm-up runs all three loops for {@code --warmup-ms} (JIT compilation),
 * then {@code --reps} repetitions of {@code --n} iterations each, the three
 * loops interleaved within a repetition so machine noise hits them alike.
 * Reports median, min and max over repetitions and writes every raw figure
 * to a JSON file. A figure, not a test: nothing here asserts a speed.
 *
 * <pre>
 * bindings/java/signal/bench.sh [--n N] [--reps R] [--warmup-ms MS] [--json PATH] [--no-pin]
 * </pre>
 */
public final class CheckBench {
    private CheckBench() {}

    static long sink;
    /** CPUs of the process, read before the batch thread pins itself. */
    static int cpus;

    /** n fast-path checks. */
    static void checks(BatchThread b, long n) {
        for (long i = 0; i < n; i++) {
            b.check();
        }
    }

    /** n steps of xorshift64 (a dependent chain of six shifts and xors). */
    static long work(long x, long n) {
        for (long i = 0; i < n; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
        }
        return x;
    }

    /** n xorshift steps, each followed by a check. */
    static long workAndCheck(BatchThread b, long x, long n) {
        for (long i = 0; i < n; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            b.check();
        }
        return x;
    }

    static double median(double[] v) {
        double[] s = v.clone();
        Arrays.sort(s);
        int m = s.length / 2;
        return s.length % 2 == 1 ? s[m] : (s[m - 1] + s[m]) / 2;
    }

    static double min(double[] v) {
        return Arrays.stream(v).min().orElse(Double.NaN);
    }

    static double max(double[] v) {
        return Arrays.stream(v).max().orElse(Double.NaN);
    }

    static String arr(double[] v) {
        List<String> s = new ArrayList<>();
        for (double d : v) {
            s.add(String.format(Locale.ROOT, "%.4f", d));
        }
        return "[" + String.join(", ", s) + "]";
    }

    static String cpuModel() {
        try {
            for (String l : Files.readAllLines(Path.of("/proc/cpuinfo"))) {
                if (l.startsWith("model name")) {
                    return l.substring(l.indexOf(':') + 1).trim().replace("\"", "'");
                }
            }
        } catch (IOException e) {
            // unknown
        }
        return "unknown";
    }

    /** Runs the benchmark; see the class comment for the arguments. */
    public static void main(String[] args) throws Exception {
        long n = 100_000_000L;
        int reps = 11;
        long warmupMs = 2000;
        boolean pin = true;
        Path json = Path.of("bindings/java/signal/target/check-bench.json");
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--n" -> n = Long.parseLong(args[++i]);
                case "--reps" -> reps = Integer.parseInt(args[++i]);
                case "--warmup-ms" -> warmupMs = Long.parseLong(args[++i]);
                case "--json" -> json = Path.of(args[++i]);
                case "--no-pin" -> pin = false;
                default -> {
                    System.err.println("usage: CheckBench [--n N] [--reps R] [--warmup-ms MS] [--json PATH] [--no-pin]");
                    System.exit(2);
                }
            }
        }
        cpus = Runtime.getRuntime().availableProcessors();
        Path dir = Files.createTempDirectory("elfen-check-bench");
        Path pagePath = dir.resolve("page");
        try (Page page = Page.create(pagePath, PageSpec.forPair(0, List.of(1), PolicyKind.BORROW_IDLE.id(), 0))) {
            BatchThread b;
            String pinNote;
            try {
                b = BatchThread.attach(page, 1, BatchOptions.defaults().withPin(pin));
                pinNote = pin ? "pinned to cpu 1" : "not pinned (--no-pin)";
            } catch (ElfenException e) {
                if (e.kind() != ElfenException.Kind.PIN) {
                    throw e;
                }
                b = BatchThread.attach(page, 1, BatchOptions.defaults().withPin(false));
                pinNote = "not pinned (" + e.getMessage() + ")";
            }
            try (BatchThread bt = b) {
                run(bt, n, reps, warmupMs, pinNote, json);
            }
        } finally {
            Files.deleteIfExists(dir);
        }
    }

    private static void run(BatchThread b, long n, int reps, long warmupMs, String pinNote, Path json)
            throws IOException {
        b.check(); // the first check runs the policy; from now on the lane is idle and unchanged
        long chunk = Math.max(1, Math.min(n, 10_000_000L));
        long end = System.nanoTime() + warmupMs * 1_000_000L;
        long x = 1;
        while (System.nanoTime() - end < 0) {
            checks(b, chunk);
            x = work(x, chunk);
            x = workAndCheck(b, x, chunk);
        }
        long slowBefore = b.stats().slowChecks();
        double[] check = new double[reps];
        double[] work = new double[reps];
        double[] both = new double[reps];
        for (int r = 0; r < reps; r++) {
            long t0 = System.nanoTime();
            checks(b, n);
            long t1 = System.nanoTime();
            x = work(x, n);
            long t2 = System.nanoTime();
            x = workAndCheck(b, x, n);
            long t3 = System.nanoTime();
            check[r] = (double) (t1 - t0) / n;
            work[r] = (double) (t2 - t1) / n;
            both[r] = (double) (t3 - t2) / n;
        }
        sink = x;
        long slowDuring = b.stats().slowChecks() - slowBefore;
        double[] overhead = new double[reps];
        for (int r = 0; r < reps; r++) {
            overhead[r] = both[r] - work[r];
        }
        String jvm = System.getProperty("java.vm.name") + " " + System.getProperty("java.runtime.version");
        System.out.printf(Locale.ROOT, "elfen Java check cost (%s, %s; %d reps x %d iterations, %d ms warm-up; %s)%n",
                jvm, cpuModel(), reps, n, warmupMs, pinNote);
        System.out.printf(Locale.ROOT, "%-34s %10s %10s %10s%n", "ns per iteration", "median", "min", "max");
        String row = "%-34s %10.3f %10.3f %10.3f%n";
        System.out.printf(Locale.ROOT, row, "check() on an idle lane", median(check), min(check), max(check));
        System.out.printf(Locale.ROOT, row, "work (one xorshift64 step)", median(work), min(work), max(work));
        System.out.printf(Locale.ROOT, row, "work + check()", median(both), min(both), max(both));
        System.out.printf(Locale.ROOT, row, "check() overhead in the work loop", median(overhead), min(overhead),
                max(overhead));
        System.out.printf(Locale.ROOT, "slow paths during the measurement: %d (expected 0: the lane stayed idle)%n",
                slowDuring);
        String out = String.format(Locale.ROOT, """
                {
                  "tool": "elfen-java CheckBench",
                  "created_unix_s": %d,
                  "system": {
                    "jvm": "%s",
                    "os": "%s %s",
                    "arch": "%s",
                    "cpus": %d,
                    "cpu_model": "%s"
                  },
                  "spec": {"iterations": %d, "reps": %d, "warmup_ms": %d, "pin": "%s", "policy": "borrow_idle",
                           "lane": "idle request lane, fast path only"},
                  "raw_ns_per_iteration": {
                    "check": %s,
                    "work": %s,
                    "work_and_check": %s,
                    "check_overhead_in_work_loop": %s
                  },
                  "derived": {
                    "check_ns_median": %.4f, "check_ns_min": %.4f, "check_ns_max": %.4f,
                    "work_ns_median": %.4f,
                    "work_and_check_ns_median": %.4f,
                    "check_overhead_ns_median": %.4f, "check_overhead_ns_min": %.4f, "check_overhead_ns_max": %.4f,
                    "slow_paths_during_measurement": %d
                  }
                }
                """, Instant.now().getEpochSecond(), jvm.replace("\"", "'"), System.getProperty("os.name"),
                System.getProperty("os.version"), System.getProperty("os.arch"),
                cpus, cpuModel(), n, reps, warmupMs, pinNote.replace("\"", "'"),
                arr(check), arr(work), arr(both), arr(overhead), median(check), min(check), max(check), median(work),
                median(both), median(overhead), min(overhead), max(overhead), slowDuring);
        if (json.getParent() != null) {
            Files.createDirectories(json.getParent());
        }
        Files.writeString(json, out);
        System.out.println("saved " + json.toAbsolutePath());
    }
}
