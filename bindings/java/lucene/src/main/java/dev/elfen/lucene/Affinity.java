package dev.elfen.lucene;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * Pins the calling thread to CPUs: a foreign-function downcall to Linux {@code
 * sched_setaffinity(0, ...)}, where pid 0 means the calling thread (a Java platform thread is
 * one kernel thread); and sets its scheduling class ({@code sched_setscheduler(0, SCHED_FIFO,
 * ...)}, {@link #setFifo}) or its nice value ({@code setpriority(PRIO_PROCESS, 0, n)}, which on
 * Linux applies to the calling thread: {@link #setNice}). Needs {@code --enable-native-access=ALL-UNNAMED} to run without a
 * warning.
 */
public final class Affinity {
  private static final int SET_BYTES = 128; // cpu_set_t: 1024 CPUs
  private static final Linker LINKER = Linker.nativeLinker();
  private static final StructLayoutHolder ERRNO = new StructLayoutHolder();
  private static final MethodHandle SET;
  private static final MethodHandle GETTID;
  private static final MethodHandle SETSCHED;
  private static final MethodHandle SETPRIORITY;
  private static final int SCHED_FIFO = 1;
  private static final int PRIO_PROCESS = 0;

  static {
    var lookup = LINKER.defaultLookup();
    SET = LINKER.downcallHandle(lookup.find("sched_setaffinity").orElseThrow(),
        FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_LONG, ValueLayout.ADDRESS),
        ERRNO.option);
    GETTID = LINKER.downcallHandle(lookup.find("gettid").orElseThrow(),
        FunctionDescriptor.of(ValueLayout.JAVA_INT));
    SETSCHED = LINKER.downcallHandle(lookup.find("sched_setscheduler").orElseThrow(),
        FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.ADDRESS),
        ERRNO.option);
    SETPRIORITY = LINKER.downcallHandle(lookup.find("setpriority").orElseThrow(),
        FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT),
        ERRNO.option);
  }

  /** The captured-errno layout and its accessor. */
  private static final class StructLayoutHolder {
    final Linker.Option option = Linker.Option.captureCallState("errno");
    final MemoryLayout layout = Linker.Option.captureStateLayout();
    final VarHandle errno = layout.varHandle(MemoryLayout.PathElement.groupElement("errno"));
  }

  private Affinity() {}

  /** Parses a CPU list such as {@code 0}, {@code 1,3} or {@code 0-2,5}. */
  public static List<Integer> parseCpus(String list) {
    List<Integer> out = new ArrayList<>();
    for (String part : list.split(",")) {
      String t = part.strip();
      if (t.isEmpty()) {
        continue;
      }
      try {
        int dash = t.indexOf('-');
        if (dash > 0) {
          int a = Integer.parseInt(t.substring(0, dash).strip());
          int b = Integer.parseInt(t.substring(dash + 1).strip());
          for (int c = a; c <= b; c++) {
            out.add(c);
          }
        } else {
          out.add(Integer.parseInt(t));
        }
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException("not a CPU list: '" + list + "'");
      }
    }
    for (int c : out) {
      if (c < 0 || c >= SET_BYTES * 8) {
        throw new IllegalArgumentException("CPU " + c + " out of range in '" + list + "'");
      }
    }
    if (out.isEmpty()) {
      throw new IllegalArgumentException("empty CPU list");
    }
    return out;
  }

  /** Restricts the calling thread to {@code cpus}. */
  public static void pinCurrentThread(List<Integer> cpus) {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment set = arena.allocate(SET_BYTES);
      for (int c : cpus) {
        long off = c / 8;
        set.set(ValueLayout.JAVA_BYTE, off, (byte) (set.get(ValueLayout.JAVA_BYTE, off) | (1 << (c % 8))));
      }
      MemorySegment state = arena.allocate(ERRNO.layout);
      int rc = (int) SET.invokeExact(state, 0, (long) SET_BYTES, set);
      if (rc != 0) {
        int errno = (int) ERRNO.errno.get(state, 0L);
        throw new IllegalStateException("sched_setaffinity(" + cpus + ") failed: errno " + errno);
      }
    } catch (RuntimeException e) {
      throw e;
    } catch (Throwable t) {
      throw new IllegalStateException("sched_setaffinity downcall failed", t);
    }
  }

  /**
   * Puts the calling thread in {@code SCHED_FIFO} at {@code priority} (1..99).
   *
   * @return null when done, else why not (e.g. {@code errno 1 (EPERM): needs CAP_SYS_NICE})
   */
  public static String setFifo(int priority) {
    if (priority < 1 || priority > 99) {
      throw new IllegalArgumentException("SCHED_FIFO priority " + priority + " not in 1..99");
    }
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment param = arena.allocate(ValueLayout.JAVA_INT);
      param.set(ValueLayout.JAVA_INT, 0, priority);
      MemorySegment state = arena.allocate(ERRNO.layout);
      int rc = (int) SETSCHED.invokeExact(state, 0, SCHED_FIFO, param);
      if (rc == 0) {
        return null;
      }
      int errno = (int) ERRNO.errno.get(state, 0L);
      return "errno " + errno + (errno == 1 ? " (EPERM): needs CAP_SYS_NICE" : "");
    } catch (RuntimeException e) {
      throw e;
    } catch (Throwable t) {
      throw new IllegalStateException("sched_setscheduler downcall failed", t);
    }
  }

  /**
   * Gives the calling thread nice value {@code nice} (-20..19) in its class ({@code
   * SCHED_OTHER}): below 0 it is ahead of normal work at nice 0 on its CPU, by weight, without a
   * real-time class that would keep the JVM's own normal threads off that CPU.
   *
   * @return null when done, else why not (e.g. {@code errno 13 (EACCES): needs CAP_SYS_NICE})
   */
  public static String setNice(int nice) {
    if (nice < -20 || nice > 19) {
      throw new IllegalArgumentException("nice " + nice + " not in -20..19");
    }
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment state = arena.allocate(ERRNO.layout);
      int rc = (int) SETPRIORITY.invokeExact(state, PRIO_PROCESS, 0, nice);
      if (rc == 0) {
        return null;
      }
      int errno = (int) ERRNO.errno.get(state, 0L);
      return "errno " + errno + (errno == 13 || errno == 1 ? " (needs CAP_SYS_NICE)" : "");
    } catch (RuntimeException e) {
      throw e;
    } catch (Throwable t) {
      throw new IllegalStateException("setpriority downcall failed", t);
    }
  }

  /** The calling thread's nice value as the kernel reports it (field 19 of its stat). */
  public static int currentNice() {
    try {
      String stat = Files.readString(Path.of("/proc/thread-self/stat"));
      String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
      return Integer.parseInt(f[19 - 3]);
    } catch (IOException e) {
      throw new IllegalStateException("reading /proc/thread-self/stat", e);
    }
  }

  /** The calling thread's scheduling policy as the kernel reports it (0 other, 1 FIFO, ...). */
  public static int currentPolicy() {
    try {
      String stat = Files.readString(Path.of("/proc/thread-self/stat"));
      String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
      return Integer.parseInt(f[41 - 3]); // field 41 (policy); fields counted from 1, 3 is state
    } catch (IOException | RuntimeException e) {
      return -1;
    }
  }

  /** The calling thread's kernel thread id. */
  public static int tid() {
    try {
      return (int) GETTID.invokeExact();
    } catch (Throwable t) {
      throw new IllegalStateException("gettid downcall failed", t);
    }
  }

  /** The calling thread's allowed CPUs as the kernel reports them ({@code Cpus_allowed_list}). */
  public static String currentCpus() {
    try {
      for (String line : Files.readAllLines(Path.of("/proc/thread-self/status"))) {
        if (line.startsWith("Cpus_allowed_list:")) {
          return line.substring("Cpus_allowed_list:".length()).strip();
        }
      }
    } catch (IOException e) {
      return "unknown (" + e.getMessage() + ")";
    }
    return "unknown";
  }
}
