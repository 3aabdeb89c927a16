package dev.elfen.lucene;

import dev.elfen.ElfenException;
import dev.elfen.LcLane;
import java.nio.file.Path;

/**
 * How the server publishes its request lane's state on the signal page: the one place that
 * talks to the Java binding's LC API ({@code ELFEN_LC_SIGNAL}).
 *
 * <ul>
 *   <li>{@code api}: attach lane {@code ELFEN_LANE} of the page {@code ELFEN_PAGE} as the LC
 *       thread ({@link LcLane}); {@link #begin} publishes the queue length and calls {@code
 *       requestBegin}, {@link #end} publishes the queue length and calls {@code requestEnd}.
 *       Open it on the worker thread: the binding records the calling thread as the lane's LC
 *       thread, the single writer of the LC line.
 *   <li>{@code none}: publish nothing (an unmodified service; a source outside it publishes).
 * </ul>
 */
public abstract class LcSignal implements AutoCloseable {
  /** Publishes nothing. */
  public static final LcSignal NONE = new LcSignal() {
    @Override
    public void begin(long id, int queueLen) {}

    @Override
    public void end(int queueLen) {}

    @Override
    public String describe() {
      return "none";
    }
  };

  /**
   * Checks {@code mode} and its arguments without attaching (to fail before a long start-up).
   *
   * @throws IllegalArgumentException for an unknown mode, or {@code api} without a page and a
   *     lane number
   */
  public static void validate(String mode, String page, String lane) {
    String m = mode == null ? "none" : mode.strip();
    switch (m) {
      case "none" -> { }
      case "api" -> {
        if (page == null || lane == null) {
          throw new IllegalArgumentException("ELFEN_LC_SIGNAL=api needs ELFEN_PAGE and ELFEN_LANE (--page, --lane)");
        }
        parseLane(lane);
      }
      default -> throw new IllegalArgumentException("ELFEN_LC_SIGNAL must be 'api' or 'none', not '" + m + "'");
    }
  }

  private static int parseLane(String lane) {
    try {
      return Integer.parseInt(lane.strip());
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("ELFEN_LANE / --lane: not a lane number: '" + lane + "'");
    }
  }

  /**
   * The publisher for {@code mode} ({@code api} or {@code none}), attached on the calling
   * thread.
   *
   * @throws IllegalArgumentException as {@link #validate}
   * @throws IllegalStateException when {@code api} cannot attach (the binding's reason)
   */
  public static LcSignal open(String mode, String page, String lane) {
    validate(mode, page, lane);
    if (mode == null || mode.strip().equals("none")) {
      return NONE;
    }
    int n = parseLane(lane);
    try {
      return new Api(LcLane.open(Path.of(page), n));
    } catch (ElfenException e) {
      throw new IllegalStateException("ELFEN_LC_SIGNAL=api: cannot attach request lane " + n + " of " + page
          + ": " + e.getMessage(), e);
    }
  }

  /** A request begins; {@code queueLen} requests wait behind it. */
  public abstract void begin(long id, int queueLen);

  /** The running request ended; {@code queueLen} requests wait. */
  public abstract void end(int queueLen);

  /** What this publisher does, for the log. */
  public abstract String describe();

  @Override
  public void close() {}

  /** Publishes through the binding's {@link LcLane}. */
  private static final class Api extends LcSignal {
    private final LcLane lc;

    Api(LcLane lc) {
      this.lc = lc;
    }

    @Override
    public void begin(long id, int queueLen) {
      lc.setQueueLen(queueLen);
      lc.requestBegin(id);
    }

    @Override
    public void end(int queueLen) {
      lc.setQueueLen(queueLen);
      lc.requestEnd();
    }

    @Override
    public String describe() {
      return "api (request lane " + lc.lane() + " of " + lc.page().path() + ", LC thread " + lc.tid() + ")";
    }

    @Override
    public void close() {
      lc.close();
    }
  }
}
