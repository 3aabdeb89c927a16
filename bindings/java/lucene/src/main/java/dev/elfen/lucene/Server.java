package dev.elfen.lucene;

import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;

/**
 * The search server of {@code docs/lc-protocol.md}: an acceptor thread and one dispatcher
 * thread per connection (on the side CPUs) read requests into a FIFO queue; ONE worker thread,
 * pinned to the request lane's CPU, takes them in order, runs the query, writes the response
 * itself and publishes begin / end with the queue length through {@link LcSignal} (the worker
 * is the single writer of the LC line). Pings, bad requests and protocol errors are answered
 * by the dispatcher at once. Every socket has {@code TCP_NODELAY} and a response is one write,
 * unless the {@code nagle} hazard is on ({@link Hazards}); with {@code small-heap} each request
 * also allocates and retains memory ({@link Churn}).
 *
 * <p>Life cycle: construct with a bound listening socket, {@link #startWorker} (pins, warms up
 * on the worker itself), {@link #awaitReady}, {@link #startAccepting} (work requests are served
 * from now on, e.g. a warm-up over the wire), then {@link #openForPings}: pings are held until
 * then, so the harness sees the service ready only once everything is warm.
 */
public final class Server implements AutoCloseable {
  /**
   * Where threads run and what the worker publishes. The acceptor and the dispatchers run at
   * nice {@code sideNice} ({@code SCHED_OTHER}; below 0 they are ahead of batch work at nice 0
   * on their CPUs), or — {@code sideFifoPriority} > 0 — in {@code SCHED_FIFO} at that priority,
   * which keeps every normal thread off their CPUs while they spin: the JVM's VM thread, JIT and
   * GC there too (a dispatcher spinning for a lock one of them holds then stalls the JVM until
   * the kernel's real-time throttling stops it, about a second).
   */
  public record Config(List<Integer> workerCpus, List<Integer> sideCpus, Supplier<LcSignal> signal, PrintStream log,
      int sideFifoPriority, int sideNice, Hazards hazards, Churn churn) {
    /** Side threads at {@code SCHED_OTHER}, nice 0, no hazard. */
    public Config(List<Integer> workerCpus, List<Integer> sideCpus, Supplier<LcSignal> signal, PrintStream log) {
      this(workerCpus, sideCpus, signal, log, 0, 0, Hazards.NONE, Churn.NONE);
    }

    /** No hazard, side threads at nice 0. */
    public Config(List<Integer> workerCpus, List<Integer> sideCpus, Supplier<LcSignal> signal, PrintStream log,
        int sideFifoPriority) {
      this(workerCpus, sideCpus, signal, log, sideFifoPriority, 0, Hazards.NONE, Churn.NONE);
    }
  }

  /**
   * Memory each request allocates ({@code allocKib} KiB in 4 KiB arrays) and of which the last
   * {@code retainKib} KiB stay reachable, so young collections have live data to copy (the {@code
   * small-heap} hazard; 0 and 0: nothing).
   */
  public record Churn(int allocKib, int retainKib) {
    /** No allocation beyond the query's own. */
    public static final Churn NONE = new Churn(0, 0);
  }

  /** A work request waiting in the queue. */
  private record Job(Conn conn, long id, String term, long arrivedNs) {}

  private static final Job STOP = new Job(null, 0, null, 0);

  /** Where the {@code nagle} hazard splits a response into two writes. */
  static final int SPLIT_AT = 16;

  private final ServerSocket listener;
  private final Search search;
  private final Config cfg;
  private final LinkedBlockingQueue<Job> queue = new LinkedBlockingQueue<>();
  private final Set<Conn> conns = ConcurrentHashMap.newKeySet();
  private final CountDownLatch ready = new CountDownLatch(1);
  private final CountDownLatch open = new CountDownLatch(1);
  private volatile Throwable workerFailure;
  private volatile String signalDescription = "not attached";
  private volatile boolean stopping;
  private final java.util.concurrent.atomic.AtomicBoolean fifoWarned = new java.util.concurrent.atomic.AtomicBoolean();
  private Thread worker;
  private Thread acceptor;

  /** Requests answered with status 0 by the worker. */
  public final AtomicLong served = new AtomicLong();
  /** Requests answered with status 1 (bad request, protocol error). */
  public final AtomicLong badRequests = new AtomicLong();
  /** Requests answered with status 2 (the query failed). */
  public final AtomicLong serviceErrors = new AtomicLong();
  /** Pings answered. */
  public final AtomicLong pings = new AtomicLong();
  /** Sum of service times of served requests. */
  public final AtomicLong serviceNsTotal = new AtomicLong();

  /** A server on {@code listener} (already bound) running {@code search}. */
  public Server(ServerSocket listener, Search search, Config cfg) {
    this.listener = listener;
    this.search = search;
    this.cfg = cfg;
  }

  /** The port it listens on. */
  public int port() {
    return listener.getLocalPort();
  }

  /** Starts the worker: it pins itself, runs {@code warmup} (may be null), then is ready. */
  public void startWorker(Runnable warmup) {
    worker = new Thread(() -> workerMain(warmup), "elfen-lucene-worker");
    worker.start();
  }

  /** Waits until the worker is warm; rethrows its failure. */
  public void awaitReady() throws InterruptedException {
    ready.await();
    if (workerFailure != null) {
      throw new IllegalStateException("worker failed during start-up: " + workerFailure.getMessage(), workerFailure);
    }
  }

  /** Starts accepting connections (after {@link #awaitReady}). */
  public void startAccepting() {
    acceptor = new Thread(this::acceptLoop, "elfen-lucene-acceptor");
    acceptor.setDaemon(true);
    acceptor.start();
  }

  /** Lets pings be answered (they wait until this is called). */
  public void openForPings() {
    open.countDown();
  }

  private void awaitOpen() {
    try {
      open.await();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private void pinSide() {
    if (cfg.sideCpus() != null) {
      Affinity.pinCurrentThread(cfg.sideCpus());
    }
    if (cfg.sideFifoPriority() > 0) {
      String refused = Affinity.setFifo(cfg.sideFifoPriority());
      if (refused != null && !fifoWarned.getAndSet(true)) {
        cfg.log().println("serve: warning: SCHED_FIFO " + cfg.sideFifoPriority() + " for the acceptor and"
            + " dispatchers refused (" + refused + "): they run SCHED_OTHER");
      }
    } else if (cfg.sideNice() != 0) {
      String refused = Affinity.setNice(cfg.sideNice());
      if (refused != null && !fifoWarned.getAndSet(true)) {
        cfg.log().println("serve: warning: nice " + cfg.sideNice() + " for the acceptor and"
            + " dispatchers refused (" + refused + "): they run at nice 0");
      }
    }
  }

  private void acceptLoop() {
    pinSide();
    while (!stopping) {
      Socket s;
      try {
        s = listener.accept();
      } catch (IOException e) {
        if (!stopping) {
          cfg.log().println("serve: accept failed: " + e);
        }
        return;
      }
      try {
        s.setTcpNoDelay(!cfg.hazards().nagle());
        Conn c = new Conn(s);
        conns.add(c);
        Thread t = new Thread(() -> dispatch(c), "elfen-lucene-dispatch-" + s.getPort());
        t.setDaemon(true);
        t.start();
      } catch (IOException e) {
        cfg.log().println("serve: setting up a connection failed: " + e);
        closeQuietly(s);
      }
    }
  }

  /** Reads one connection's requests: queues work, answers pings and bad requests at once. */
  private void dispatch(Conn c) {
    pinSide();
    byte[] header = new byte[Protocol.REQUEST_HEADER_BYTES];
    byte[] payload = new byte[Protocol.MAX_PAYLOAD_BYTES];
    byte[] resp = new byte[Protocol.RESPONSE_BYTES];
    try {
      DataInputStream in = new DataInputStream(new BufferedInputStream(c.socket.getInputStream(), 1 << 16));
      while (!c.closed) {
        try {
          in.readFully(header);
        } catch (EOFException e) {
          break;
        }
        long arrived = System.nanoTime();
        Protocol.Header h = Protocol.decodeHeader(header);
        if (h.len() > Protocol.MAX_PAYLOAD_BYTES) {
          badRequests.incrementAndGet();
          c.respond(resp, h.id(), 0, 0, Protocol.STATUS_BAD_REQUEST, 0);
          c.closeAfterProtocolError(in);
          break;
        }
        int len = (int) h.len();
        in.readFully(payload, 0, len);
        if (h.kind() == Protocol.KIND_PING) {
          awaitOpen();
          pings.incrementAndGet();
          c.respond(resp, h.id(), 0, 0, Protocol.STATUS_OK, 0);
          continue;
        }
        String term = h.kind() == Protocol.KIND_WORK
            ? Tasks.termOfPayload(new String(payload, 0, len, StandardCharsets.UTF_8)) : null;
        if (term == null) {
          badRequests.incrementAndGet();
          c.respond(resp, h.id(), 0, 0, Protocol.STATUS_BAD_REQUEST, 0);
          continue;
        }
        c.pending.incrementAndGet();
        queue.add(new Job(c, h.id(), term, arrived));
      }
    } catch (IOException e) {
      if (!c.closed && !stopping) {
        cfg.log().println("serve: connection from port " + c.socket.getPort() + " failed: " + e.getMessage());
      }
      c.close();
    } finally {
      c.readDone = true;
      if (c.pending.get() == 0) {
        c.close();
      }
    }
  }

  /** What the worker publishes through (after {@link #awaitReady}). */
  public String signalDescription() {
    return signalDescription;
  }

  private void workerMain(Runnable warmup) {
    LcSignal signal;
    try {
      if (cfg.workerCpus() != null) {
        Affinity.pinCurrentThread(cfg.workerCpus());
      }
      cfg.log().println("serve: worker tid " + Affinity.tid() + " on CPUs " + Affinity.currentCpus());
      signal = cfg.signal().get();
      signalDescription = signal.describe();
    } catch (Throwable t) {
      workerFailure = t;
      ready.countDown();
      return;
    }
    try {
      if (warmup != null) {
        warmup.run();
      }
    } catch (Throwable t) {
      signal.close();
      workerFailure = t;
      ready.countDown();
      return;
    }
    ready.countDown();
    try (signal) {
      serveQueue(signal);
    }
  }

  private void serveQueue(LcSignal signal) {
    byte[] resp = new byte[Protocol.RESPONSE_BYTES];
    int chunks = cfg.churn().allocKib() / 4;
    byte[][] retained = new byte[Math.max(1, cfg.churn().retainKib() / 4)][];
    int next = 0;
    while (true) {
      Job job;
      try {
        job = queue.take();
      } catch (InterruptedException e) {
        return;
      }
      if (job == STOP) {
        return;
      }
      Conn c = job.conn();
      if (c.closed) {
        c.finishOne();
        continue;
      }
      long begin = System.nanoTime();
      signal.begin(job.id(), queue.size());
      int status = Protocol.STATUS_OK;
      int hits = 0;
      try {
        hits = search.run(job.term());
        for (int i = 0; i < chunks; i++) {
          byte[] b = new byte[4096];
          b[i & 4095] = (byte) hits;
          if (cfg.churn().retainKib() > 0) {
            retained[next] = b;
            next = (next + 1) % retained.length;
          }
        }
      } catch (IOException | RuntimeException e) {
        status = Protocol.STATUS_SERVICE_ERROR;
        serviceErrors.incrementAndGet();
        cfg.log().println("serve: query '" + job.term() + "' failed: " + e);
      }
      long end = System.nanoTime();
      // counted before the response leaves, so a client that has its
      // response sees the request counted
      if (status == Protocol.STATUS_OK) {
        served.incrementAndGet();
        serviceNsTotal.addAndGet(end - begin);
      }
      c.respond(resp, job.id(), end - begin, begin - job.arrivedNs(), status, hits);
      signal.end(queue.size());
      c.finishOne();
    }
  }

  /** Requests waiting in the queue now. */
  public int queueLength() {
    return queue.size();
  }

  @Override
  public void close() throws InterruptedException {
    stopping = true;
    open.countDown();
    closeQuietly(listener);
    for (Conn c : conns) {
      c.close();
    }
    if (worker != null) {
      queue.add(STOP);
      worker.join(5000);
    }
    if (acceptor != null) {
      acceptor.join(5000);
    }
  }

  private static void closeQuietly(AutoCloseable c) {
    try {
      c.close();
    } catch (Exception ignored) {
      // closing on the way out
    }
  }

  /** One client connection; the worker and its dispatcher both write responses to it. */
  private final class Conn {
    final Socket socket;
    final OutputStream out;
    final AtomicInteger pending = new AtomicInteger();
    volatile boolean readDone;
    volatile boolean closed;

    Conn(Socket socket) throws IOException {
      this.socket = socket;
      this.out = socket.getOutputStream();
    }

    void respond(byte[] buf, long id, long serviceNs, long queuedNs, int status, int result) {
      Protocol.encodeResponse(buf, id, serviceNs, queuedNs, status, result);
      synchronized (this) {
        if (closed) {
          return;
        }
        try {
          if (cfg.hazards().nagle()) {
            // two sends: without TCP_NODELAY the second waits for the first's ACK
            out.write(buf, 0, SPLIT_AT);
            out.write(buf, SPLIT_AT, buf.length - SPLIT_AT);
          } else {
            out.write(buf);
          }
        } catch (IOException e) {
          close();
        }
      }
    }

    /** A queued request of this connection is done (answered or skipped). */
    void finishOne() {
      if (pending.decrementAndGet() == 0 && readDone) {
        close();
      }
    }

    /**
     * Ends the connection after the error response: FIN first, then up to 100 ms / 1 MiB of
     * what the client still sends is read and dropped, so closing with unread data does not
     * reset the connection before the client has read the response.
     */
    void closeAfterProtocolError(DataInputStream in) {
      try {
        synchronized (this) {
          if (!closed) {
            socket.shutdownOutput();
          }
        }
        socket.setSoTimeout(100);
        byte[] sink = new byte[8192];
        long deadline = System.nanoTime() + 100_000_000L;
        for (int total = 0; total < (1 << 20) && System.nanoTime() < deadline; ) {
          int n = in.read(sink);
          if (n < 0) {
            break;
          }
          total += n;
        }
      } catch (IOException ignored) {
        // closing anyway
      }
      close();
    }

    void close() {
      synchronized (this) {
        if (closed) {
          return;
        }
        closed = true;
      }
      closeQuietly(socket);
      conns.remove(this);
    }
  }
}
