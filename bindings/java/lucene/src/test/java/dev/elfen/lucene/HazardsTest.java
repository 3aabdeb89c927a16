package dev.elfen.lucene;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The hazard switches: their names, and a server with the nagle and small-heap ones on. */
class HazardsTest {
  @TempDir
  Path dir;

  @Test
  void namesParseAndUnknownOnesAreRefused() {
    assertEquals(Hazards.NONE, Hazards.parse(null));
    assertEquals(Hazards.NONE, Hazards.parse(" none "));
    assertEquals(new Hazards(true, true, true, true), Hazards.parse("all"));
    Hazards h = Hazards.parse("nagle, small-heap");
    assertTrue(h.nagle() && h.smallHeap() && !h.coldStart() && !h.untouchedHeap());
    assertEquals("nagle,small-heap", h.describe());
    assertEquals("none", Hazards.NONE.describe());
    assertFalse(Hazards.NONE.any());
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Hazards.parse("nagle,gc"));
    assertTrue(e.getMessage().contains("unknown hazard 'gc'") && e.getMessage().contains("cold-start"),
        e.getMessage());
  }

  @Test
  void aResponseWrittenInTwoPartsArrivesWhole() throws Exception {
    TestCorpus tc = TestCorpus.build(dir);
    try (LuceneIndex idx = LuceneIndex.open(tc.index, tc.corpus)) {
      ServerSocket ss = new ServerSocket();
      ss.bind(new InetSocketAddress("127.0.0.1", 0));
      PrintStream quiet = new PrintStream(OutputStream.nullOutputStream());
      Server server = new Server(ss, new Search(idx.reader(), true), new Server.Config(null, null,
          () -> LcSignal.NONE, quiet, 0, 0, Hazards.parse("nagle,small-heap"), new Server.Churn(64, 256)));
      server.startWorker(null);
      server.awaitReady();
      server.startAccepting();
      server.openForPings();
      try (WireClient c = new WireClient(server.port(), 10_000)) {
        for (int i = 0; i < 20; i++) {
          c.send(i, 0, Protocol.KIND_WORK, "search".getBytes(StandardCharsets.UTF_8));
          Protocol.Response r = c.read();
          assertEquals(i, r.id());
          assertEquals(Protocol.STATUS_OK, r.status());
          assertTrue(r.result() > 0);
        }
      } finally {
        server.close();
      }
      assertEquals(20, server.served.get());
    }
  }
}
