package dev.elfen;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

/** Where the repository's test data is, and small helpers the tests share. */
final class TestSupport {
    private TestSupport() {}

    /**
     * testdata/signal of the repository: from the {@code elfen.repo.root}
     * system property (the pom sets it), else the first parent of the working
     * directory that has it. Fails the test (never skips) when it is missing:
     * the golden vectors ship with the repository.
     */
    static Path signalTestdata() {
        String root = System.getProperty("elfen.repo.root");
        if (root != null) {
            Path p = Path.of(root, "testdata", "signal").toAbsolutePath().normalize();
            if (Files.isRegularFile(p.resolve("v2-2lanes.json"))) {
                return p;
            }
        }
        for (Path d = Path.of("").toAbsolutePath(); d != null; d = d.getParent()) {
            Path p = d.resolve("testdata").resolve("signal");
            if (Files.isRegularFile(p.resolve("v2-2lanes.json"))) {
                return p;
            }
        }
        return fail("testdata/signal/v2-2lanes.json not found (elfen.repo.root=" + root + ", working directory "
                + Path.of("").toAbsolutePath() + "): the golden vectors ship with the repository");
    }

    /** The golden JSON, parsed. */
    @SuppressWarnings("unchecked")
    static Map<String, Object> goldenJson() throws IOException {
        return (Map<String, Object>) MiniJson.parse(Files.readString(signalTestdata().resolve("v2-2lanes.json")));
    }

    /** The golden JSON's field list. */
    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> goldenFields() throws IOException {
        return (List<Map<String, Object>>) goldenJson().get("fields");
    }

    /**
     * {@code header.batch_shmid} in the golden vectors: the kernel picks a real
     * page's id, so tests set the bytes they compare to this value (and point
     * a copy of the golden page at a live segment before attaching it).
     */
    static final int GOLDEN_SHMID = 123_456_789;

    /** A copy of the golden page naming a segment that holds the golden batch bytes (freed at close). */
    record GoldenCopy(Path path, int shmid, MemorySegment batch, Arena arena) implements AutoCloseable {
        @Override
        public void close() {
            arena.close();
        }
    }

    /** Copies the golden page to {@code dir}/{@code name}, its batch bytes into a new segment. */
    static GoldenCopy copyGolden(Path dir, String name) throws IOException {
        Path td = signalTestdata();
        byte[] page = Files.readAllBytes(td.resolve("v2-2lanes.page.bin"));
        byte[] batch = Files.readAllBytes(td.resolve("v2-2lanes.batch.bin"));
        Arena arena = Arena.ofShared();
        BatchSegment.Created seg;
        try {
            seg = BatchSegment.create(batch.length, 0644, null, arena);
        } catch (BatchSegment.ErrnoException e) {
            arena.close();
            return fail("creating a batch segment: " + e.getMessage());
        }
        MemorySegment.copy(batch, 0, seg.memory(), ValueLayout.JAVA_BYTE, 0, batch.length);
        setLe(page, Layout.Header.BATCH_SHMID, seg.id(), 4);
        Path p = dir.resolve(name);
        Files.write(p, page);
        return new GoldenCopy(p, seg.id(), seg.memory(), arena);
    }

    /** The page file's bytes (the segment id set to {@link #GOLDEN_SHMID}) and the batch segment's bytes. */
    static byte[][] goldenBytes(Page page) throws IOException {
        byte[] p = Files.readAllBytes(page.path());
        setLe(p, Layout.Header.BATCH_SHMID, GOLDEN_SHMID, 4);
        return new byte[][] {p, page.batchSegment().toArray(ValueLayout.JAVA_BYTE)};
    }

    /** Writes {@code v} little-endian in {@code size} bytes at {@code off}. */
    static void setLe(byte[] b, int off, long v, int size) {
        for (int i = 0; i < size; i++) {
            b[off + i] = (byte) (v >>> (8 * i));
        }
    }

    /** A 2-lane page (cpu 0 request, cpu 1 batch) with {@code policy} and {@code budgetNs}. */
    static PageSpec twoLanes(int policy, long budgetNs) {
        return PageSpec.forPair(0, List.of(1), policy, budgetNs);
    }

    /** Reads a little-endian unsigned field of {@code size} bytes. */
    static long readLe(byte[] b, int off, int size) {
        long v = 0;
        for (int i = size - 1; i >= 0; i--) {
            v = (v << 8) | (b[off + i] & 0xFF);
        }
        return v;
    }

    /** The calling thread's kernel thread id. */
    static int gettid() {
        return Native.gettid();
    }

    /**
     * Whether thread {@code tid} of this process is asleep in a shared
     * {@code FUTEX_WAIT} (a futex nap; the JVM's own waits use private
     * futexes). The kernel shows a thread's system call in
     * /proc/self/task/TID/syscall only while the thread is blocked, and a
     * futex waiter blocks only once it is queued on the word: from then on a
     * {@code FUTEX_WAKE} finds it. Where that file cannot be read, the
     * thread's state 'S' in its stat file stands in.
     */
    static boolean inFutexWait(int tid) {
        Path task = Path.of("/proc/self/task/" + tid);
        String call;
        try {
            call = Files.readString(task.resolve("syscall")).trim();
        } catch (IOException e) {
            try {
                String stat = Files.readString(task.resolve("stat"));
                return stat.substring(stat.lastIndexOf(')') + 2).startsWith("S");
            } catch (IOException | RuntimeException e2) {
                return false;
            }
        }
        // "nr arg0 arg1 ...", "running" or "-1 sp pc"
        String[] f = call.split(" ");
        if (f.length < 3 || !f[0].equals(Long.toString(Native.SYS_FUTEX))) {
            return false;
        }
        return Long.decode(f[2]) == Native.FUTEX_WAIT;
    }

    /** Waits up to {@code ms} for {@code cond}; returns whether it held. */
    static boolean await(long ms, java.util.function.BooleanSupplier cond) throws InterruptedException {
        long deadline = System.nanoTime() + ms * 1_000_000L;
        while (System.nanoTime() - deadline < 0) {
            if (cond.getAsBoolean()) {
                return true;
            }
            Thread.sleep(1);
        }
        return cond.getAsBoolean();
    }
}
