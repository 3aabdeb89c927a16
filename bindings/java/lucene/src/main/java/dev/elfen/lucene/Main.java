package dev.elfen.lucene;

import java.io.IOException;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;

/** The {@code elfen-lucene} command: {@code serve}, {@code index}, {@code queries}, {@code demand}, {@code batch}. */
public final class Main {
  static final String USAGE = """
      usage: elfen-lucene <command> [--option value ...]

        serve     the LC search server (docs/lc-protocol.md)
                    --port N (ELFEN_PORT)  --cpu LIST (ELFEN_CPU)  --side-cpus LIST (ELFEN_SIDE_CPUS)
                    --lc-signal api|none (ELFEN_LC_SIGNAL)  --page PATH (ELFEN_PAGE)  --lane N (ELFEN_LANE)
                    --side-nice N (ELFEN_SIDE_NICE, 0): acceptor and dispatchers at nice N (-20..19)
                    --side-fifo-priority N (ELFEN_SIDE_FIFO_PRIORITY, 0): acceptor and dispatchers SCHED_FIFO
                      instead (caution: the JVM's own threads on their CPUs wait while they spin)
                    --warmup-rounds N (20)  --exact-total-hits true|false (true)
                    --hazards LIST (ELFEN_LUCENE_HAZARDS, none): nagle,untouched-heap,cold-start,small-heap|all
                    --alloc-kib N  --retain-kib N: per-request garbage and live memory
                      (small-heap: 256, 8192; untouched-heap: 64, 0)
        index     build the index if it is missing (--rebuild: build it again)
        queries   print the term queries of the tasks file: index, kind, term, freq (tab-separated)
        demand    service time of each query run alone on the pinned worker, to JSON
                    --cpu LIST  --reps N (20)  --rounds N (3)  --json PATH
        batch     index the corpus as a batch job, throughput lines on stdout
                    --seconds S (0: until --passes are done)  --passes N (1; 0: no limit)  --report-ms N (1000)
                    --ram-buffer-mb M (1: a flush between two checks takes ~15 ms, 16: ~150 ms)
                    --page PATH (ELFEN_PAGE) --lane N (ELFEN_LANE): check() per document

      common:     --corpus-dir DIR (ELFEN_CORPUS_DIR, ~/.cache/elfen/corpus)  --corpus FILE
                  --index DIR (ELFEN_INDEX_DIR, <corpus dir>/index-lucene10[-xK])
                  --copies K (ELFEN_LUCENE_COPIES, 1): index each document K times (K-fold demand)
                  --data-dir DIR (ELFEN_DATA_DIR: holds wikimedium.10M.nostopwords.tasks)  --tasks FILE
      """;

  private Main() {}

  /** Entry point; exits 1 with a one-line reason on a user-facing error, 2 on bad usage. */
  public static void main(String[] args) {
    if (args.length == 0 || args[0].equals("--help") || args[0].equals("help")) {
      System.out.print(USAGE);
      System.exit(args.length == 0 ? 2 : 0);
    }
    List<String> rest = Arrays.asList(args).subList(1, args.length);
    try {
      Options o = new Options(rest, System.getenv());
      switch (args[0]) {
        case "serve" -> serve(o);
        case "index" -> index(o);
        case "queries" -> queries(o);
        case "demand" -> Demand.run(o);
        case "batch" -> IndexBatch.run(o);
        default -> {
          System.err.print("unknown command '" + args[0] + "'\n" + USAGE);
          System.exit(2);
        }
      }
    } catch (IllegalArgumentException e) {
      System.err.println("elfen-lucene: " + e.getMessage());
      System.exit(2);
    } catch (IOException | IllegalStateException e) {
      System.err.println("elfen-lucene " + args[0] + ": " + e.getMessage());
      System.exit(1);
    } catch (InterruptedException e) {
      System.exit(1);
    }
  }

  /**
   * Opens the verified index, building it first when it does not exist yet (never over a
   * half-built, stale or corrupt one: that is an error naming the fix).
   */
  static LuceneIndex openOrBuild(Options o, PrintStream log) throws IOException {
    Path dir = o.indexDir();
    Path corpus = o.corpusFile();
    if (!Files.exists(dir)) {
      log.println("index: none at " + dir + "; building it from " + corpus);
      LuceneIndex.build(corpus, dir, o.copies(), log);
    }
    return LuceneIndex.open(dir, Files.exists(corpus) ? corpus : null, o.copies());
  }

  static void index(Options o) throws IOException {
    Path dir = o.indexDir();
    if (o.getFlag("rebuild", false) || !Files.exists(dir)) {
      LuceneIndex.build(o.corpusFile(), dir, o.copies(), System.err);
    }
    try (LuceneIndex idx = LuceneIndex.open(dir, o.corpusFile(), o.copies())) {
      System.out.printf("index %s: %s docs, %.1f MB, built in %.1f s (Lucene %s), checksums verified%n", dir,
          idx.info("docs"), Long.parseLong(idx.info("bytes")) / 1e6, Long.parseLong(idx.info("build_ms")) / 1e3,
          idx.info("lucene"));
    }
  }

  static void queries(Options o) throws IOException {
    Path file = o.tasksFile();
    Tasks t = Tasks.load(file);
    for (Tasks.Query q : t.queries()) {
      System.out.println(q.index() + "\t" + q.kind() + "\t" + q.term() + "\t" + q.freq());
    }
    System.err.println("queries: " + file + ": " + t.summary());
    for (String b : t.badExamples()) {
      System.err.println("queries: unparseable " + b);
    }
  }

  /** Loads the query list, saying what was skipped. */
  static Tasks loadTasks(Options o, PrintStream log) throws IOException {
    Path file = o.tasksFile();
    Tasks t = Tasks.load(file);
    log.println("queries: " + file + ": " + t.summary());
    for (String b : t.badExamples()) {
      log.println("queries: unparseable " + b);
    }
    if (t.queries().isEmpty()) {
      throw new IllegalStateException(file + " has no HighTerm/MedTerm/LowTerm queries");
    }
    return t;
  }

  /** Runs every query {@code rounds} times on the calling thread; logs each round's time. */
  static void warmUp(Search search, List<Tasks.Query> queries, int rounds, PrintStream log) {
    for (int r = 0; r < rounds; r++) {
      long t0 = System.nanoTime();
      try {
        for (Tasks.Query q : queries) {
          search.run(q.term());
        }
      } catch (IOException e) {
        throw new IllegalStateException("warm-up query failed: " + e, e);
      }
      log.printf("serve: warm-up round %d/%d: %d queries in %.2f s%n", r + 1, rounds, queries.size(),
          (System.nanoTime() - t0) / 1e9);
    }
  }

  /**
   * A full collection after warm-up, so the objects of start-up (index structures, query list)
   * sit in the old generation and later young collections copy only requests in flight.
   */
  static void settleHeap(PrintStream log) {
    Jvm.GcCounts before = Jvm.gc();
    long t = System.nanoTime();
    System.gc();
    log.printf("serve: full collection after warm-up: %.1f ms (%d collections)%n", (System.nanoTime() - t) / 1e6,
        Jvm.gc().minus(before).collections());
  }

  static void serve(Options o) throws IOException, InterruptedException {
    long t0 = System.nanoTime();
    PrintStream log = System.err;
    int port = o.getInt("port", "ELFEN_PORT", -1);
    if (port < 0 || port > 65535) {
      throw new IllegalArgumentException("serve needs --port N or ELFEN_PORT");
    }
    String mode = o.get("lc-signal", "ELFEN_LC_SIGNAL", "none");
    String page = o.get("page", "ELFEN_PAGE");
    String lane = o.get("lane", "ELFEN_LANE");
    LcSignal.validate(mode, page, lane);
    String cpu = o.get("cpu", "ELFEN_CPU");
    String side = o.get("side-cpus", "ELFEN_SIDE_CPUS");
    List<Integer> workerCpus = cpu == null ? null : Affinity.parseCpus(cpu);
    List<Integer> sideCpus = side == null ? null : Affinity.parseCpus(side);
    int sideFifo = o.getInt("side-fifo-priority", "ELFEN_SIDE_FIFO_PRIORITY", 0);
    if (sideFifo < 0 || sideFifo > 99) {
      throw new IllegalArgumentException("--side-fifo-priority must be 0 (off) or 1..99, got " + sideFifo);
    }
    int sideNice = o.getInt("side-nice", "ELFEN_SIDE_NICE", 0);
    if (sideNice < -20 || sideNice > 19) {
      throw new IllegalArgumentException("--side-nice must be in -20..19, got " + sideNice);
    }
    if (sideNice != 0 && sideFifo > 0) {
      throw new IllegalArgumentException("--side-nice and --side-fifo-priority exclude each other");
    }
    if (sideFifo > 0) {
      log.println("serve: warning: acceptor and dispatchers at SCHED_FIFO " + sideFifo + ": the JVM's VM"
          + " thread, JIT and GC on the side CPUs wait while one of them spins (--side-nice keeps them"
          + " ahead of batch work without that)");
    }
    Hazards hazards = Hazards.parse(o.get("hazards", "ELFEN_LUCENE_HAZARDS"));
    // small-heap: garbage and live data per request; untouched-heap: garbage,
    // so the requests reach fresh heap pages sooner
    int allocDefault = hazards.smallHeap() ? 256 : hazards.untouchedHeap() ? 64 : 0;
    Server.Churn churn = new Server.Churn(o.getInt("alloc-kib", null, allocDefault),
        o.getInt("retain-kib", null, hazards.smallHeap() ? 8192 : 0));
    if (churn.allocKib() < 0 || churn.retainKib() < 0) {
      throw new IllegalArgumentException("--alloc-kib and --retain-kib must be >= 0");
    }
    if (hazards.any()) {
      log.println("serve: hazards on: " + hazards.describe() + " (bindings/java/lucene/README.md)");
    }
    for (String w : Jvm.latencyWarnings(!hazards.untouchedHeap())) {
      log.println("serve: warning: " + w);
    }
    if (workerCpus == null) {
      log.println("serve: warning: no --cpu / ELFEN_CPU: the worker is not pinned");
    }
    ServerSocket listener = new ServerSocket();
    listener.setReuseAddress(true);
    try {
      listener.bind(new InetSocketAddress("127.0.0.1", port), 1024);
    } catch (IOException e) {
      throw new IOException("cannot listen on 127.0.0.1:" + port + ": " + e.getMessage(), e);
    }
    LuceneIndex idx = openOrBuild(o, log);
    log.printf("serve: index %s: %d docs, checksums verified%n", o.indexDir(), idx.reader().numDocs());
    Tasks tasks = loadTasks(o, log);
    boolean exact = Boolean.parseBoolean(o.get("exact-total-hits", null, "true"));
    Search search = new Search(idx.reader(), exact);
    Server server = new Server(listener, search, new Server.Config(workerCpus, sideCpus,
        () -> LcSignal.open(mode, page, lane), log, sideFifo, sideNice, hazards, churn));
    // cold-start: no warm-up of any kind
    int rounds = hazards.coldStart() ? 0 : o.getInt("warmup-rounds", null, 20);
    long tw = System.nanoTime();
    server.startWorker(() -> warmUp(search, tasks.queries(), rounds, log));
    server.awaitReady();
    server.startAccepting();
    if (hazards.coldStart()) {
      log.println("serve: hazard cold-start: no warm-up rounds, none over the wire, no full collection");
    } else {
      try (WireClient c = new WireClient(server.port(), 60_000)) {
        int ok = c.runAll(tasks.queries());
        log.printf("serve: warm-up over the wire: %d/%d ok%n", ok, tasks.queries().size());
      }
    }
    if (hazards.untouchedHeap()) {
      // the requests go on allocating where warm-up stopped: into pages never touched
      log.println("serve: hazard untouched-heap: no full collection after warm-up, heap not pre-touched");
    } else if (!hazards.coldStart()) {
      settleHeap(log);
    }
    double warmS = (System.nanoTime() - tw) / 1e9;
    Jvm.GcCounts gcAtReady = Jvm.gc();
    long servedAtReady = server.served.get();
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      try {
        server.close();
      } catch (InterruptedException ignored) {
        // exiting anyway
      }
      Jvm.GcCounts gc = Jvm.gc().minus(gcAtReady);
      long n = server.served.get() - servedAtReady;
      log.printf("serve: stopped: %d requests served after ready (%d bad, %d errors, %d pings);"
          + " %d GC pauses, %d ms in GC (%s)%n", n, server.badRequests.get(), server.serviceErrors.get(),
          server.pings.get(), gc.collections(), gc.millis(), Jvm.collectors());
    }, "elfen-lucene-shutdown"));
    server.openForPings();
    System.out.printf("serve: ready on 127.0.0.1:%d: %d queries, lc-signal %s, worker CPUs %s, side CPUs %s,"
        + " hazards %s, start-up %.1f s (warm-up %.1f s)%n", server.port(), tasks.queries().size(),
        server.signalDescription(), cpu == null ? "any" : cpu, side == null ? "any" : side, hazards.describe(),
        (System.nanoTime() - t0) / 1e9, warmS);
    System.out.flush();
    Thread.currentThread().join();
  }
}
