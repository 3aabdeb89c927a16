package dev.elfen.lucene;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * The four hazards of the thesis' chapter 4 (Tailor), each switched on by {@code serve
 * --hazards LIST} ({@code ELFEN_LUCENE_HAZARDS}), so a profiler can be shown to find them. By
 * default every one is guarded against (README: "hazards and what guards against each").
 *
 * <ul>
 *   <li>{@code nagle}: accepted sockets without {@code TCP_NODELAY}, and every response written
 *       in two writes (16 + 16 bytes): the second waits under Nagle until the client ACKs the
 *       first, which a client that delays its ACKs does only at its next request or its
 *       delayed-ACK timer (~40 ms).
 *   <li>{@code untouched-heap}: the launcher starts the JVM without {@code -XX:+AlwaysPreTouch},
 *       with transparent huge pages for the heap where the kernel offers them and a young
 *       generation larger than warm-up fills; no full collection after warm-up; each request
 *       allocates {@code --alloc-kib} (64) KiB more: the requests allocate into heap pages never
 *       touched, each first touch a page fault (a huge page zeroed). The client idles before its
 *       load (the thesis' deep idle).
 *   <li>{@code cold-start}: no warm-up at all (no query rounds on the worker, none over the wire,
 *       no full collection): the first requests load classes and run interpreted while the JIT
 *       compiles.
 *   <li>{@code small-heap}: the launcher gives a 64 MB heap with a 16 MB young generation, and
 *       every request allocates {@code --alloc-kib} (256) KiB more and keeps the last {@code
 *       --retain-kib} (8192) KiB alive: young collections every few dozen requests, each copying
 *       live data, and full collections as the old generation fills.
 * </ul>
 */
public record Hazards(boolean nagle, boolean untouchedHeap, boolean coldStart, boolean smallHeap) {
  /** Every hazard guarded against. */
  public static final Hazards NONE = new Hazards(false, false, false, false);

  /** The names {@link #parse} accepts, in order. */
  public static final List<String> NAMES = List.of("nagle", "untouched-heap", "cold-start", "small-heap");

  /**
   * Parses a comma-separated list of {@link #NAMES}, {@code all} or {@code none} (null or empty:
   * none).
   *
   * @throws IllegalArgumentException naming an unknown hazard
   */
  public static Hazards parse(String list) {
    if (list == null || list.isBlank()) {
      return NONE;
    }
    boolean n = false;
    boolean u = false;
    boolean c = false;
    boolean s = false;
    for (String raw : list.split(",")) {
      String h = raw.strip().toLowerCase(Locale.ROOT);
      switch (h) {
        case "none", "" -> { }
        case "all" -> {
          n = true;
          u = true;
          c = true;
          s = true;
        }
        case "nagle" -> n = true;
        case "untouched-heap" -> u = true;
        case "cold-start" -> c = true;
        case "small-heap" -> s = true;
        default -> throw new IllegalArgumentException("--hazards / ELFEN_LUCENE_HAZARDS: unknown hazard '" + h
            + "' (known: " + String.join(", ", NAMES) + ", all, none)");
      }
    }
    return new Hazards(n, u, c, s);
  }

  /** Whether any hazard is on. */
  public boolean any() {
    return nagle || untouchedHeap || coldStart || smallHeap;
  }

  /** The hazards on, comma-separated ({@code none} when none). */
  public String describe() {
    List<String> on = new ArrayList<>();
    if (nagle) {
      on.add("nagle");
    }
    if (untouchedHeap) {
      on.add("untouched-heap");
    }
    if (coldStart) {
      on.add("cold-start");
    }
    if (smallHeap) {
      on.add("small-heap");
    }
    return on.isEmpty() ? "none" : String.join(",", on);
  }
}
