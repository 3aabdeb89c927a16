package dev.elfen.lucene;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Demand measured alone: every query run {@code reps} times back to back on one thread pinned
 * to the request lane's CPU, nothing else of this program running; {@code rounds} rounds after
 * a warm-up. Per round: mean, p50, p99, max of the per-request service time, the shortest and
 * longest query (by the median of its reps), the share of requests per 1 ms bucket (the paper's Figure 1) and per
 * 0.1 ms bucket; across rounds, the median of each figure. Writes JSON and prints a summary.
 */
public final class Demand {
  private Demand() {}

  /** Figures of one round. */
  record Round(double meanUs, double p50Us, double p99Us, double maxUs, Tasks.Query shortest, double shortestUs,
      Tasks.Query longest, double longestUs, double[] share1ms, double[] share100us, double[] perQueryUs,
      long[] totalHits) {}
  // perQueryUs: each query's median over its reps (robust to a pause hitting one rep)

  static void run(Options o) throws IOException, InterruptedException {
    PrintStream log = System.err;
    String cpu = o.get("cpu", "ELFEN_CPU");
    int reps = o.getInt("reps", null, 20);
    int rounds = o.getInt("rounds", null, 3);
    int warm = o.getInt("warmup-rounds", null, 20);
    Path json = Path.of(o.get("json", null, "lucene-demand.json"));
    boolean exact = Boolean.parseBoolean(o.get("exact-total-hits", null, "true"));
    if (reps < 1 || rounds < 1) {
      throw new IllegalArgumentException("--reps and --rounds must be >= 1");
    }
    String loadBefore = loadavg();
    try (LuceneIndex idx = Main.openOrBuild(o, log)) {
      Tasks tasks = Main.loadTasks(o, log);
      Search search = new Search(idx.reader(), exact);
      List<Tasks.Query> qs = tasks.queries();
      List<Round> results = new ArrayList<>();
      Throwable[] failure = {null};
      Jvm.GcCounts[] gc0 = {null};
      Thread t = new Thread(() -> {
        try {
          if (cpu != null) {
            Affinity.pinCurrentThread(Affinity.parseCpus(cpu));
          }
          log.println("demand: thread on CPUs " + Affinity.currentCpus());
          Main.warmUp(search, qs, warm, log);
          Main.settleHeap(log);
          gc0[0] = Jvm.gc();
          for (int r = 0; r < rounds; r++) {
            results.add(round(search, qs, reps));
            Round x = results.get(r);
            log.printf("demand: round %d/%d: mean %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us%n", r + 1, rounds,
                x.meanUs(), x.p50Us(), x.p99Us(), x.maxUs());
          }
        } catch (Throwable e) {
          failure[0] = e;
        }
      }, "elfen-lucene-demand");
      t.start();
      t.join();
      if (failure[0] != null) {
        throw new IllegalStateException("demand measurement failed: " + failure[0], failure[0]);
      }
      Jvm.GcCounts gc = Jvm.gc().minus(gc0[0]);
      Map<String, Object> doc = report(results, qs, reps, cpu, exact, idx, tasks, loadBefore, gc);
      Files.writeString(json, Json.write(doc));
      print(results, reps, qs.size(), json, gc);
    }
  }

  static Round round(Search search, List<Tasks.Query> qs, int reps) throws IOException {
    long[] all = new long[qs.size() * reps];
    double[] perQuery = new double[qs.size()];
    long[] hits = new long[qs.size()];
    int k = 0;
    long[] mine = new long[reps];
    for (Tasks.Query q : qs) {
      for (int i = 0; i < reps; i++) {
        long b = System.nanoTime();
        search.run(q.term());
        long d = System.nanoTime() - b;
        all[k++] = d;
        mine[i] = d;
      }
      Arrays.sort(mine);
      perQuery[q.index()] = pct(mine, 0.5);
      hits[q.index()] = search.lastTotalHits();
    }
    long[] sorted = all.clone();
    Arrays.sort(sorted);
    double mean = Arrays.stream(all).average().orElse(0) / 1e3;
    int lo = 0;
    int hi = 0;
    for (int i = 1; i < perQuery.length; i++) {
      lo = perQuery[i] < perQuery[lo] ? i : lo;
      hi = perQuery[i] > perQuery[hi] ? i : hi;
    }
    return new Round(mean, pct(sorted, 0.50), pct(sorted, 0.99), sorted[sorted.length - 1] / 1e3, qs.get(lo),
        perQuery[lo], qs.get(hi), perQuery[hi], shares(all, 1_000_000), shares(all, 100_000), perQuery, hits);
  }

  /** The {@code p} quantile (nearest rank) of sorted nanoseconds, in µs. */
  static double pct(long[] sorted, double p) {
    int i = (int) Math.ceil(p * sorted.length) - 1;
    return sorted[Math.max(0, Math.min(sorted.length - 1, i))] / 1e3;
  }

  /** Share of samples in buckets {@code [i*width, (i+1)*width)}, up to the largest sample's bucket. */
  static double[] shares(long[] ns, long width) {
    long max = Arrays.stream(ns).max().orElse(0);
    double[] out = new double[(int) (max / width) + 1];
    for (long v : ns) {
      out[(int) (v / width)] += 1.0 / ns.length;
    }
    return out;
  }

  static double median(double[] xs) {
    double[] s = xs.clone();
    Arrays.sort(s);
    int n = s.length;
    return n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
  }

  private static double med(List<Round> rs, java.util.function.ToDoubleFunction<Round> f) {
    return median(rs.stream().mapToDouble(f).toArray());
  }

  private static List<Double> round3(double[] xs) {
    List<Double> out = new ArrayList<>();
    for (double x : xs) {
      out.add(Math.round(x * 1e4) / 1e4);
    }
    return out;
  }

  private static Map<String, Object> query(Tasks.Query q, double us, long hits) {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("index", q.index());
    m.put("kind", q.kind());
    m.put("term", q.term());
    m.put("median_us", us);
    m.put("total_hits", hits);
    return m;
  }

  static Map<String, Object> report(List<Round> rs, List<Tasks.Query> qs, int reps, String cpu, boolean exact,
      LuceneIndex idx, Tasks tasks, String loadBefore, Jvm.GcCounts gc) {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("tool", "elfen-lucene demand");
    m.put("time", Instant.now().toString());
    Map<String, Object> spec = new LinkedHashMap<>();
    spec.put("queries", qs.size());
    spec.put("query_kinds", tasks.summary());
    spec.put("reps_per_query", reps);
    spec.put("rounds", rs.size());
    spec.put("cpu", cpu);
    spec.put("exact_total_hits", exact);
    spec.put("index_docs", idx.reader().numDocs());
    spec.put("index_bytes", Long.parseLong(idx.info("bytes")));
    spec.put("lucene", idx.info("lucene"));
    spec.put("java", System.getProperty("java.vm.name") + " " + System.getProperty("java.version"));
    spec.put("gc", Jvm.collectors());
    m.put("spec", spec);
    Map<String, Object> sys = new LinkedHashMap<>();
    sys.put("loadavg_before", loadBefore);
    sys.put("loadavg_after", loadavg());
    sys.put("gc_collections_during_run", gc.collections());
    sys.put("gc_ms_during_run", gc.millis());
    m.put("system", sys);
    Map<String, Object> med = new LinkedHashMap<>();
    med.put("mean_us", med(rs, Round::meanUs));
    med.put("p50_us", med(rs, Round::p50Us));
    med.put("p99_us", med(rs, Round::p99Us));
    med.put("max_us", med(rs, Round::maxUs));
    med.put("shortest_query_median_us", med(rs, Round::shortestUs));
    med.put("longest_query_median_us", med(rs, Round::longestUs));
    med.put("longest_over_shortest", med(rs, r -> r.longestUs() / r.shortestUs()));
    m.put("median_over_rounds", med);
    List<Object> rounds = new ArrayList<>();
    for (Round r : rs) {
      Map<String, Object> x = new LinkedHashMap<>();
      x.put("mean_us", r.meanUs());
      x.put("p50_us", r.p50Us());
      x.put("p99_us", r.p99Us());
      x.put("max_us", r.maxUs());
      x.put("shortest", query(r.shortest(), r.shortestUs(), r.totalHits()[r.shortest().index()]));
      x.put("longest", query(r.longest(), r.longestUs(), r.totalHits()[r.longest().index()]));
      x.put("share_per_1ms_bucket", round3(r.share1ms()));
      x.put("share_per_100us_bucket", round3(r.share100us()));
      rounds.add(x);
    }
    m.put("rounds", rounds);
    List<Object> per = new ArrayList<>();
    Round last = rs.get(rs.size() - 1);
    for (Tasks.Query q : qs) {
      double[] us = rs.stream().mapToDouble(r -> r.perQueryUs()[q.index()]).toArray();
      per.add(query(q, median(us), last.totalHits()[q.index()]));
    }
    m.put("per_query_median_us_median_over_rounds", per);
    return m;
  }

  static void print(List<Round> rs, int reps, int queries, Path json, Jvm.GcCounts gc) {
    Round last = rs.get(rs.size() - 1);
    System.out.printf("demand: %d queries x %d reps x %d rounds (medians over rounds)%n", queries, reps, rs.size());
    System.out.printf("  mean %.1f us  p50 %.1f us  p99 %.1f us  max %.1f us%n", med(rs, Round::meanUs),
        med(rs, Round::p50Us), med(rs, Round::p99Us), med(rs, Round::maxUs));
    System.out.printf("  shortest query %s:%s %.1f us, longest %s:%s %.1f us (x%.0f)%n", last.shortest().kind(),
        last.shortest().term(), med(rs, Round::shortestUs), last.longest().kind(), last.longest().term(),
        med(rs, Round::longestUs), med(rs, r -> r.longestUs() / r.shortestUs()));
    StringBuilder b = new StringBuilder("  share per 1 ms bucket (last round):");
    double[] s = last.share1ms();
    for (int i = 0; i < s.length; i++) {
      if (s[i] > 0) {
        b.append(String.format(" [%d,%d) ms %.4f", i, i + 1, s[i]));
      }
    }
    System.out.println(b);
    b = new StringBuilder("  share per 0.1 ms bucket (last round, first 10):");
    s = last.share100us();
    for (int i = 0; i < Math.min(10, s.length); i++) {
      b.append(String.format(" %.3f", s[i]));
    }
    System.out.println(b);
    System.out.printf("  GC during the run: %d collections, %d ms; JSON: %s%n", gc.collections(), gc.millis(), json);
  }

  static String loadavg() {
    try {
      return Files.readString(Path.of("/proc/loadavg")).strip();
    } catch (IOException e) {
      return "unknown";
    }
  }
}
