package dev.elfen.lucene;

/**
 * How the server publishes its request lane's state on the signal page: the one place that
 * talks to the Java binding's LC API ({@code ELFEN_LC_SIGNAL}).
 *
 * <ul>
 *   <li>{@code api}: attach lane {@code ELFEN_LANE} of the page {@code ELFEN_PAGE} as the LC
 *       thread; {@link #begin} / {@link #end} call {@code requestBegin} / {@code requestEnd}
 *       and publish the queue length. Only the worker thread calls them (the single writer of
 *       the LC line).
 *   <li>{@code none}: publish nothing (an unmodified service; a source outside it publishes).
 * </ul>
 *
 * <p>TODO(java binding): {@code api} needs {@code bindings/java/signal} ({@code LcLane}); until
 * it is a dependency of this module, asking for {@code api} is an error, never a silent no-op.
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
   * The publisher for {@code mode} ({@code api} or {@code none}).
   *
   * @throws IllegalArgumentException for an unknown mode, or {@code api} without page and lane
   * @throws IllegalStateException when {@code api} is asked for and the binding is not available
   */
  public static LcSignal open(String mode, String page, String lane) {
    String m = mode == null ? "none" : mode.strip();
    switch (m) {
      case "none":
        return NONE;
      case "api":
        if (page == null || lane == null) {
          throw new IllegalArgumentException("ELFEN_LC_SIGNAL=api needs ELFEN_PAGE and ELFEN_LANE (--page, --lane)");
        }
        throw new IllegalStateException("ELFEN_LC_SIGNAL=api: the Java binding of the signal page"
            + " (bindings/java/signal, LcLane) is not available to this build of elfen-lucene yet;"
            + " use ELFEN_LC_SIGNAL=none");
      default:
        throw new IllegalArgumentException("ELFEN_LC_SIGNAL must be 'api' or 'none', not '" + m + "'");
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
}
