package dev.elfen.lucene;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The wire protocol end to end: a tiny index served on an ephemeral port. */
class ServerTest {
  @TempDir
  Path dir;

  private LuceneIndex idx;
  private Server server;

  @BeforeEach
  void start() throws Exception {
    TestCorpus tc = TestCorpus.build(dir);
    idx = LuceneIndex.open(tc.index, tc.corpus);
    ServerSocket ss = new ServerSocket();
    ss.bind(new InetSocketAddress("127.0.0.1", 0));
    Search search = new Search(idx.reader(), true);
    List<Tasks.Query> warm = List.of(new Tasks.Query(0, 1, "HighTerm", "search", -1));
    server = new Server(ss, search, new Server.Config(null, null, () -> LcSignal.NONE,
        new PrintStream(OutputStream.nullOutputStream())));
    server.startWorker(() -> Main.warmUp(search, warm, 1, new PrintStream(OutputStream.nullOutputStream())));
    server.awaitReady();
    server.startAccepting();
    server.openForPings();
  }

  @AfterEach
  void stop() throws Exception {
    server.close();
    idx.close();
  }

  private WireClient client() throws IOException {
    return new WireClient(server.port(), 10_000);
  }

  @Test
  void pingIsAnsweredWithoutWork() throws IOException {
    try (WireClient c = client()) {
      c.send(42, 0, Protocol.KIND_PING, new byte[0]);
      assertEquals(new Protocol.Response(42, 0, 0, Protocol.STATUS_OK, 0), c.read());
    }
    assertEquals(0, server.served.get());
  }

  @Test
  void queryRoundTrip() throws IOException {
    try (WireClient c = client()) {
      c.send(7, 3, Protocol.KIND_WORK, "lane".getBytes(StandardCharsets.UTF_8));
      c.send(8, 4, Protocol.KIND_WORK, "body:search".getBytes(StandardCharsets.UTF_8));
      c.send(9, 5, Protocol.KIND_WORK, "absent".getBytes(StandardCharsets.UTF_8));
      Protocol.Response r = c.read();
      assertEquals(7, r.id());
      assertEquals(Protocol.STATUS_OK, r.status());
      assertEquals(5, r.result());
      assertTrue(r.serviceNs() > 0, "service_ns " + r.serviceNs());
      assertTrue(r.queuedNs() >= 0);
      r = c.read();
      assertEquals(8, r.id());
      assertEquals(10, r.result());
      r = c.read();
      assertEquals(9, r.id());
      assertEquals(Protocol.STATUS_OK, r.status());
      assertEquals(0, r.result());
    }
    assertEquals(3, server.served.get());
  }

  @Test
  void unknownKindAndEmptyQueryAreBadRequestsAndTheConnectionStaysUp() throws IOException {
    try (WireClient c = client()) {
      c.send(1, 0, 9, "x".getBytes(StandardCharsets.UTF_8));
      assertEquals(new Protocol.Response(1, 0, 0, Protocol.STATUS_BAD_REQUEST, 0), c.read());
      c.send(2, 0, Protocol.KIND_WORK, new byte[0]);
      assertEquals(Protocol.STATUS_BAD_REQUEST, c.read().status());
      c.send(3, 0, Protocol.KIND_WORK, "search".getBytes(StandardCharsets.UTF_8));
      Protocol.Response r = c.read();
      assertEquals(3, r.id());
      assertEquals(Protocol.STATUS_OK, r.status());
    }
  }

  @Test
  void tooLongPayloadIsStatus1AndClosesTheConnection() throws IOException {
    try (WireClient c = client()) {
      ByteBuffer h = ByteBuffer.allocate(Protocol.REQUEST_HEADER_BYTES).order(ByteOrder.LITTLE_ENDIAN);
      h.putLong(5).putLong(0).putInt(Protocol.MAX_PAYLOAD_BYTES + 1).putInt(Protocol.KIND_WORK);
      c.sendRaw(h.array());
      assertEquals(new Protocol.Response(5, 0, 0, Protocol.STATUS_BAD_REQUEST, 0), c.read());
      assertTrue(c.closedByPeer());
    }
    try (WireClient c = client()) {
      c.send(6, 0, Protocol.KIND_PING, new byte[0]);
      assertEquals(6, c.read().id());
    }
  }

  @Test
  void tooLongPayloadFollowedByDataStillDeliversTheErrorResponse() throws IOException {
    try (WireClient c = client()) {
      ByteBuffer h = ByteBuffer.allocate(Protocol.REQUEST_HEADER_BYTES + 4096).order(ByteOrder.LITTLE_ENDIAN);
      h.putLong(11).putLong(0).putInt(1 << 20).putInt(Protocol.KIND_WORK);
      c.sendRaw(h.array());
      assertEquals(new Protocol.Response(11, 0, 0, Protocol.STATUS_BAD_REQUEST, 0), c.read());
      assertTrue(c.closedByPeer());
    }
  }

  @Test
  void aClosedConnectionDoesNotStopTheServer() throws IOException {
    try (WireClient c = client()) {
      for (int i = 0; i < 50; i++) {
        c.send(i, 0, Protocol.KIND_WORK, "search".getBytes(StandardCharsets.UTF_8));
      }
      c.sendRaw(new byte[] {1, 2, 3}); // a frame cut short by the close
    }
    try (WireClient c = client()) {
      c.send(77, 0, Protocol.KIND_WORK, "engine".getBytes(StandardCharsets.UTF_8));
      Protocol.Response r = c.read();
      assertEquals(77, r.id());
      assertEquals(Protocol.STATUS_OK, r.status());
    }
    assertEquals(0, server.serviceErrors.get());
  }
}
