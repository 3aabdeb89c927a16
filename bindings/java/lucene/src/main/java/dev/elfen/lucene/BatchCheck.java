package dev.elfen.lucene;

/**
 * The batch side for the indexing batch job: {@link #check()} at each loop back-edge (per
 * document added). With {@code ELFEN_PAGE} and {@code ELFEN_LANE} it attaches a batch thread of
 * that lane through the Java binding and {@code check()} may nap; without them it does
 * nothing.
 *
 * <p>TODO(java binding): attaching needs {@code bindings/java/signal}; until it is a dependency
 * of this module, giving a page is an error, never a silent no-op.
 */
public abstract class BatchCheck implements AutoCloseable {
  /** Checks nothing (no page given). */
  public static final BatchCheck NONE = new BatchCheck() {
    @Override
    public void check() {}

    @Override
    public String describe() {
      return "none (no ELFEN_PAGE / ELFEN_LANE)";
    }
  };

  /**
   * The check for {@code page} / {@code lane}; both null gives {@link #NONE}.
   *
   * @throws IllegalArgumentException when only one of them is given
   * @throws IllegalStateException when they are given and the binding is not available
   */
  public static BatchCheck open(String page, String lane) {
    if (page == null && lane == null) {
      return NONE;
    }
    if (page == null || lane == null) {
      throw new IllegalArgumentException("give both ELFEN_PAGE and ELFEN_LANE (--page, --lane), or neither");
    }
    throw new IllegalStateException("ELFEN_PAGE/ELFEN_LANE given: the Java binding of the signal page"
        + " (bindings/java/signal, BatchThread) is not available to this build of elfen-lucene yet");
  }

  /** The batch check: returns at once unless the policy says nap. */
  public abstract void check();

  /** What this check does, for the log. */
  public abstract String describe();

  @Override
  public void close() {}
}
