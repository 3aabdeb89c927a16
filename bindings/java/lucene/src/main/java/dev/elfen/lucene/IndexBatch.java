package dev.elfen.lucene;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import org.apache.lucene.index.IndexWriter;
import org.apache.lucene.index.IndexWriterConfig;
import org.apache.lucene.index.NoMergePolicy;
import org.apache.lucene.index.SerialMergeScheduler;
import org.apache.lucene.store.Directory;
import org.apache.lucene.store.FSDirectory;

/**
 * A real Java batch job: Lucene indexing of the corpus into a throwaway index in a temporary
 * directory, on one thread, with the batch {@link BatchCheck#check()} at the loop back-edge
 * (once per document added).
 *
 * <p>stdout, one line per {@code --report-ms} and one at the end, {@code key=value} for a
 * harness to parse: {@code progress docs=N elapsed_s=S docs_per_s=R interval_docs_per_s=R
 * max_check_gap_ms=G interval_max_check_gap_ms=g}, then {@code done ...}. Flushes run on the indexing thread between two
 * checks (merging is off, so no merge runs at all); {@code max_check_gap_ms} is the longest
 * time between two checks since the start (class loading and JIT included), {@code
 * interval_max_check_gap_ms} the longest in the last interval: the longest the job can hold a
 * lane against a request.
 *
 * <p>Stops after {@code --passes} passes over the corpus (0: no limit) or {@code --seconds}
 * (0: no limit), or on SIGTERM; the temporary index is deleted in every case.
 */
public final class IndexBatch {
  private IndexBatch() {}

  static void run(Options o) throws IOException, InterruptedException {
    PrintStream log = System.err;
    BatchCheck check = BatchCheck.open(o.get("page", "ELFEN_PAGE"), o.get("lane", "ELFEN_LANE"));
    int passes = o.getInt("passes", null, 1);
    double seconds = o.getDouble("seconds", null, 0);
    long reportNs = o.getInt("report-ms", null, 1000) * 1_000_000L;
    double ramMb = o.getDouble("ram-buffer-mb", null, 1);
    if (passes == 0 && seconds <= 0) {
      log.println("batch: no --passes and no --seconds limit: runs until stopped");
    }
    long tl = System.nanoTime();
    List<Corpus.Doc> docs = Corpus.load(o.corpusFile());
    log.printf("batch: %d documents loaded in %.1f s; check: %s%n", docs.size(), (System.nanoTime() - tl) / 1e9,
        check.describe());
    Path tmp = Files.createTempDirectory("elfen-lucene-batch-");
    CountDownLatch finished = new CountDownLatch(1);
    Thread main = Thread.currentThread();
    Thread hook = new Thread(() -> {
      main.interrupt();
      try {
        finished.await();
      } catch (InterruptedException ignored) {
        // exiting anyway
      }
    }, "elfen-lucene-batch-stop");
    Runtime.getRuntime().addShutdownHook(hook);
    long count = 0;
    long t0 = System.nanoTime();
    long maxGap = 0;
    long intervalMaxGap = 0;
    long lastCheck = t0;
    long lastReport = t0;
    long lastCount = 0;
    try (Directory dir = FSDirectory.open(tmp);
        IndexWriter w = new IndexWriter(dir, new IndexWriterConfig(LuceneIndex.analyzer())
            .setOpenMode(IndexWriterConfig.OpenMode.CREATE).setRAMBufferSizeMB(ramMb)
            .setMergePolicy(NoMergePolicy.INSTANCE).setMergeScheduler(new SerialMergeScheduler()))) {
      outer:
      for (int pass = 0; passes == 0 || pass < passes; pass++) {
        for (Corpus.Doc d : docs) {
          check.check();
          long now = System.nanoTime();
          maxGap = Math.max(maxGap, now - lastCheck);
          intervalMaxGap = Math.max(intervalMaxGap, now - lastCheck);
          lastCheck = now;
          if (Thread.interrupted() || (seconds > 0 && now - t0 >= seconds * 1e9)) {
            break outer;
          }
          if (now - lastReport >= reportNs) {
            line("progress", count, t0, now, (count - lastCount) / ((now - lastReport) / 1e9), maxGap, intervalMaxGap);
            intervalMaxGap = 0;
            lastReport = now;
            lastCount = count;
          }
          w.addDocument(LuceneIndex.document(d));
          count++;
        }
        w.deleteAll();
      }
    } catch (IOException e) {
      if (!Thread.currentThread().isInterrupted()) {
        throw e;
      }
    } finally {
      long now = System.nanoTime();
      line("done", count, t0, now, count / ((now - t0) / 1e9), maxGap, intervalMaxGap);
      LuceneIndex.deleteTree(tmp);
      check.close();
      finished.countDown();
    }
  }

  private static void line(String what, long count, long t0, long now, double intervalRate, long maxGapNs,
      long intervalMaxGapNs) {
    double s = (now - t0) / 1e9;
    System.out.printf("%s docs=%d elapsed_s=%.3f docs_per_s=%.1f interval_docs_per_s=%.1f max_check_gap_ms=%.3f"
        + " interval_max_check_gap_ms=%.3f%n", what, count, s, count / Math.max(s, 1e-9), intervalRate,
        maxGapNs / 1e6, intervalMaxGapNs / 1e6);
    System.out.flush();
  }
}
