package dev.elfen.lucene;

import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.List;

/** What the JVM was started with and how much it collected. */
public final class Jvm {
  private Jvm() {}

  /** Collections and their total time so far, over all collectors. */
  public record GcCounts(long collections, long millis) {
    /** The difference {@code this - earlier}. */
    public GcCounts minus(GcCounts earlier) {
      return new GcCounts(collections - earlier.collections, millis - earlier.millis);
    }
  }

  /** The collectors' counts now. */
  public static GcCounts gc() {
    long n = 0;
    long ms = 0;
    for (GarbageCollectorMXBean b : ManagementFactory.getGarbageCollectorMXBeans()) {
      n += Math.max(0, b.getCollectionCount());
      ms += Math.max(0, b.getCollectionTime());
    }
    return new GcCounts(n, ms);
  }

  /** The collectors' names, e.g. {@code Copy, MarkSweepCompact} for the serial collector. */
  public static String collectors() {
    List<String> names = new ArrayList<>();
    for (GarbageCollectorMXBean b : ManagementFactory.getGarbageCollectorMXBeans()) {
      names.add(b.getName());
    }
    return String.join(", ", names);
  }

  /**
   * Warnings about JVM options a latency-critical run needs (the launcher {@code bin/elfen-lucene}
   * sets them all): a pre-touched heap of fixed size ({@code pretouch} false: the heap is left
   * untouched on purpose, no warning about it).
   */
  public static List<String> latencyWarnings(boolean pretouch) {
    List<String> args = ManagementFactory.getRuntimeMXBean().getInputArguments();
    List<String> out = new ArrayList<>();
    if (pretouch && !args.contains("-XX:+AlwaysPreTouch")) {
      out.add("-XX:+AlwaysPreTouch is not set: the first allocations after start-up page-fault");
    }
    Runtime rt = Runtime.getRuntime();
    if (rt.totalMemory() != rt.maxMemory()) {
      out.add("-Xms differs from -Xmx: the heap grows (and page-faults) during the run");
    }
    return out;
  }
}
