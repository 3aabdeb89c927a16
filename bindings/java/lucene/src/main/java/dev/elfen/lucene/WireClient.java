package dev.elfen.lucene;

import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * A minimal client of the LC wire protocol (TCP_NODELAY): the server's warm-up over the wire
 * and the tests use it.
 */
public final class WireClient implements AutoCloseable {
  private final Socket socket;
  private final OutputStream out;
  private final DataInputStream in;

  /** Connects to 127.0.0.1:{@code port}. */
  public WireClient(int port, int timeoutMs) throws IOException {
    socket = new Socket();
    socket.setTcpNoDelay(true);
    socket.connect(new InetSocketAddress("127.0.0.1", port), timeoutMs);
    socket.setSoTimeout(timeoutMs);
    out = socket.getOutputStream();
    in = new DataInputStream(new BufferedInputStream(socket.getInputStream()));
  }

  /** Sends a request. */
  public void send(long id, long arg, int kind, byte[] payload) throws IOException {
    out.write(Protocol.encodeRequest(id, arg, kind, payload));
  }

  /** Sends raw bytes (for malformed frames in tests). */
  public void sendRaw(byte[] bytes) throws IOException {
    out.write(bytes);
  }

  /** Reads one response. */
  public Protocol.Response read() throws IOException {
    byte[] b = new byte[Protocol.RESPONSE_BYTES];
    in.readFully(b);
    return Protocol.decodeResponse(b);
  }

  /** Whether the server closed the connection (the next read hits end of stream). */
  public boolean closedByPeer() throws IOException {
    return in.read() < 0;
  }

  /**
   * Sends every query once (pipelined, ids 0..n-1, arg = the query's index) and reads all the
   * answers; returns how many had status 0.
   */
  public int runAll(List<Tasks.Query> queries) throws IOException {
    for (Tasks.Query q : queries) {
      send(q.index(), q.index(), Protocol.KIND_WORK, q.term().getBytes(StandardCharsets.UTF_8));
    }
    int ok = 0;
    for (int i = 0; i < queries.size(); i++) {
      if (read().status() == Protocol.STATUS_OK) {
        ok++;
      }
    }
    return ok;
  }

  @Override
  public void close() throws IOException {
    socket.close();
  }
}
