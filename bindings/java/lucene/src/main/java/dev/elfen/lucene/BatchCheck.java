package dev.elfen.lucene;

import dev.elfen.BatchOptions;
import dev.elfen.BatchThread;
import dev.elfen.ElfenException;
import java.nio.file.Path;

/**
 * The batch side for the indexing batch job: {@link #check()} at each loop back-edge (per
 * document added). With {@code ELFEN_PAGE} and {@code ELFEN_LANE} it attaches the calling
 * thread to that batch lane through the Java binding ({@link BatchThread}: pinned to the lane's
 * CPU, the controller line's policy and nap backend) and {@code check()} may nap; without them
 * it does nothing.
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
   * The check for {@code page} / {@code lane}, attached on the calling thread (the thread that
   * then calls {@link #check()}); both null gives {@link #NONE}.
   *
   * @throws IllegalArgumentException when only one of them is given, or the lane is not a number
   * @throws IllegalStateException when the binding cannot attach (its reason)
   */
  public static BatchCheck open(String page, String lane) {
    if (page == null && lane == null) {
      return NONE;
    }
    if (page == null || lane == null) {
      throw new IllegalArgumentException("give both ELFEN_PAGE and ELFEN_LANE (--page, --lane), or neither");
    }
    int n;
    try {
      n = Integer.parseInt(lane.strip());
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("ELFEN_LANE / --lane: not a lane number: '" + lane + "'");
    }
    try {
      return new Attached(BatchThread.open(Path.of(page), n, BatchOptions.defaults()));
    } catch (ElfenException e) {
      throw new IllegalStateException("cannot attach batch lane " + n + " of " + page + ": " + e.getMessage(), e);
    }
  }

  /** The batch check: returns at once unless the policy says nap. */
  public abstract void check();

  /** What this check does, for the log. */
  public abstract String describe();

  @Override
  public void close() {}

  /** Checks through the binding's {@link BatchThread}. */
  private static final class Attached extends BatchCheck {
    private final BatchThread bt;

    Attached(BatchThread bt) {
      this.bt = bt;
    }

    @Override
    public void check() {
      bt.check();
    }

    @Override
    public String describe() {
      return bt.describe();
    }

    @Override
    public void close() {
      bt.close();
    }
  }
}
