package dev.elfen.lucene;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.elfen.LcLineSnapshot;
import dev.elfen.Page;
import dev.elfen.PageSpec;
import dev.elfen.State;
import dev.elfen.policy.PolicyKind;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class SignalTest {
  @Test
  void noneIsANoOp() {
    assertSame(LcSignal.NONE, LcSignal.open("none", null, null));
    assertSame(LcSignal.NONE, LcSignal.open(null, null, null));
    LcSignal.NONE.begin(1, 0);
    LcSignal.NONE.end(0);
  }

  @Test
  void badArgumentsAreRejected() {
    assertThrows(IllegalArgumentException.class, () -> LcSignal.validate("api", null, "0"));
    assertThrows(IllegalArgumentException.class, () -> LcSignal.validate("api", "/dev/shm/x", "zero"));
    assertThrows(IllegalArgumentException.class, () -> LcSignal.validate("bpf", null, null));
    assertThrows(IllegalArgumentException.class, () -> BatchCheck.open("/dev/shm/x", null));
  }

  @Test
  void apiWithoutAPageIsAnErrorNeverASilentNoOp(@TempDir Path dir) {
    IllegalStateException e = assertThrows(IllegalStateException.class,
        () -> LcSignal.open("api", dir.resolve("no-page").toString(), "0"));
    assertTrue(e.getMessage().contains("cannot attach request lane 0"), e.getMessage());
    e = assertThrows(IllegalStateException.class, () -> BatchCheck.open(dir.resolve("no-page").toString(), "1"));
    assertTrue(e.getMessage().contains("cannot attach batch lane 1"), e.getMessage());
  }

  private static Page twoLanePage(Path dir) throws Exception {
    return Page.create(dir.resolve("page"), PageSpec.forPair(0, List.of(1), PolicyKind.BORROW_IDLE.id(), 0));
  }

  @Test
  void serverPublishesEachRequestThroughTheLcApi(@TempDir Path dir) throws Exception {
    TestCorpus tc = TestCorpus.build(dir);
    try (Page page = twoLanePage(dir); LuceneIndex idx = LuceneIndex.open(tc.index, tc.corpus)) {
      ServerSocket ss = new ServerSocket();
      ss.bind(new InetSocketAddress("127.0.0.1", 0));
      String path = page.path().toString();
      Server server = new Server(ss, new Search(idx.reader(), true), new Server.Config(null, null,
          () -> LcSignal.open("api", path, "0"), new PrintStream(OutputStream.nullOutputStream())));
      try {
        server.startWorker(null);
        server.awaitReady();
        assertTrue(server.signalDescription().startsWith("api (request lane 0"), server.signalDescription());
        server.startAccepting();
        server.openForPings();
        try (WireClient c = new WireClient(server.port(), 10_000)) {
          for (int i = 0; i < 3; i++) {
            c.send(100 + i, i, Protocol.KIND_WORK, "search".getBytes(StandardCharsets.UTF_8));
          }
          for (int i = 0; i < 3; i++) {
            assertEquals(Protocol.STATUS_OK, c.read().status());
          }
        }
        LcLineSnapshot s = null;
        long deadline = System.nanoTime() + 5_000_000_000L;
        while (System.nanoTime() < deadline) {
          s = page.readLc(0);
          if (s.requests() == 3 && !State.busy(s.state())) {
            break;
          }
          Thread.sleep(1);
        }
        assertEquals(3, s.requests(), "requests counted on the LC line");
        assertEquals(102, s.requestId());
        assertTrue(!State.busy(s.state()), "idle after the last request");
        assertEquals(3, State.seq(s.state()));
        assertTrue(s.lcTid() > 0, "the worker is attached as the LC thread");
      } finally {
        server.close();
      }
      assertEquals(0, page.readLc(0).lcTid(), "the worker detached when the server stopped");
    }
  }

  @Test
  void batchCheckAttachesABatchLane(@TempDir Path dir) throws Exception {
    Assumptions.assumeTrue(Runtime.getRuntime().availableProcessors() >= 2,
        "needs cpus:2: the batch lane is CPU 1");
    try (Page page = twoLanePage(dir)) {
      AtomicReference<String> seen = new AtomicReference<>();
      AtomicReference<Throwable> failed = new AtomicReference<>();
      Thread t = new Thread(() -> {
        try (BatchCheck bc = BatchCheck.open(page.path().toString(), "1")) {
          for (int i = 0; i < 1000; i++) {
            bc.check();
          }
          seen.set(bc.describe());
        } catch (Throwable e) {
          failed.set(e);
        }
      });
      t.start();
      t.join();
      if (failed.get() != null) {
        throw new AssertionError(failed.get());
      }
      assertTrue(seen.get().startsWith("batch lane 1"), seen.get());
    }
  }
}
