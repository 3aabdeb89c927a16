package dev.elfen;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.elfen.policy.PolicyKind;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Java and Rust on one Java-created page, through the C ABI (libelfen, the
 * Rust runtime behind elfen.h), each side with its own mappings: a Java LC
 * wakes a napping Rust batch thread, and a Rust LC wakes a napping Java batch
 * thread, by futex. Runs where libelfen.so is built (ELFEN_LIBELFEN, or
 * target/release or $CARGO_TARGET_DIR/release); says "skipped" otherwise.
 * The golden vectors remain the cross-language contract.
 */
@SuppressWarnings("try")
class RustInteropTest {
    @TempDir
    Path dir;

    static SymbolLookup lib;
    static Path libPath;

    static Path findLib() {
        List<Path> c = new ArrayList<>();
        String env = System.getenv("ELFEN_LIBELFEN");
        if (env != null) {
            c.add(Path.of(env));
        }
        String root = System.getProperty("elfen.repo.root", ".");
        c.add(Path.of(root, "target", "release", "libelfen.so"));
        String ctd = System.getenv("CARGO_TARGET_DIR");
        if (ctd != null) {
            c.add(Path.of(ctd, "release", "libelfen.so"));
        }
        return c.stream().filter(Files::isRegularFile).findFirst().orElse(null);
    }

    @BeforeAll
    static void load() {
        Path p = findLib();
        if (p == null) {
            String msg = "needs input:"
                    + Path.of(System.getProperty("elfen.repo.root", "."), "target", "release", "libelfen.so").toAbsolutePath().normalize()
                    + ": no libelfen.so (make -C bindings/c, or set ELFEN_LIBELFEN); Java-Rust interop untested";
            System.out.println("skipped: " + msg);
            Assumptions.assumeTrue(false, msg);
        }
        lib = SymbolLookup.libraryLookup(p, Arena.global());
        libPath = p;
    }

    /** Skips (saying so) when the library found was built before {@code symbol} existed. */
    static void requireSymbol(String symbol) {
        if (lib.find(symbol).isEmpty()) {
            String msg = "needs input:" + libPath + ": it has no " + symbol + " (built from older sources: rebuild it with"
                    + " make -C bindings/c)";
            System.out.println("skipped: " + msg);
            Assumptions.assumeTrue(false, msg);
        }
    }

    @SuppressWarnings("restricted")
    static MethodHandle fn(String name, FunctionDescriptor fd) {
        return Linker.nativeLinker().downcallHandle(lib.find(name).orElseThrow(), fd);
    }

    static String lastError() throws Throwable {
        MemorySegment s = (MemorySegment) fn("elfen_last_error", FunctionDescriptor.of(ADDRESS)).invokeExact();
        return s.equals(MemorySegment.NULL) ? "?" : reinterpret(s);
    }

    @SuppressWarnings("restricted")
    static String reinterpret(MemorySegment s) {
        return s.reinterpret(4096).getString(0);
    }

    static PageSpec futexPage() {
        PageSpec s = TestSupport.twoLanes(PolicyKind.BORROW_IDLE.id(), 0);
        return s.withLane(1, s.lanes().get(1).withNap(Layout.Nap.FUTEX));
    }

    @Test
    void aJavaLcWakesARustBatchThread() throws Throwable {
        MethodHandle attach = fn("elfen_batch_attach_ex", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, ADDRESS));
        MethodHandle slow = fn("elfen_check_slow", FunctionDescriptor.ofVoid());
        MethodHandle detach = fn("elfen_batch_detach", FunctionDescriptor.of(JAVA_INT));
        Path p = dir.resolve("j2r");
        try (Page page = Page.create(p, futexPage()); LcLane lc = LcLane.attach(page, 0)) {
            AtomicLong work = new AtomicLong();
            AtomicBoolean stop = new AtomicBoolean();
            AtomicReference<Throwable> failure = new AtomicReference<>();
            CountDownLatch attached = new CountDownLatch(1);
            AtomicLong tid = new AtomicLong();
            Thread rust = new Thread(() -> {
                tid.set(TestSupport.gettid());
                try (Arena a = Arena.ofConfined()) {
                    MemorySegment opts = a.allocate(16, 4);
                    opts.set(JAVA_INT, 0, Layout.Nap.FUTEX); // nap
                    opts.set(JAVA_INT, 4, 0); // no pin
                    opts.set(JAVA_INT, 8, 1_000_000); // 1 s futex timeout: a lost wakeup would show
                    int r = (int) attach.invokeExact(a.allocateFrom(p.toString()), 1, opts);
                    if (r != 0) {
                        throw new AssertionError("elfen_batch_attach_ex: " + lastError());
                    }
                    attached.countDown();
                    while (!stop.get()) {
                        slow.invokeExact(); // the Rust slow path: the policy, and a nap while busy
                        work.incrementAndGet();
                    }
                    int d = (int) detach.invokeExact();
                    assertEquals(0, d);
                } catch (Throwable t) {
                    failure.set(t);
                    attached.countDown();
                }
            }, "rust-batch");
            rust.start();
            attached.await();
            try {
                assertTrue(TestSupport.await(10_000, () -> page.readBatch(1).attached() == 1 && work.get() > 10),
                        "the Rust batch thread runs while the lane is idle");
                for (int r = 1; r <= 5; r++) {
                    int req = r;
                    long wakes = page.readBatch(1).wakes();
                    lc.requestBegin(r);
                    assertTrue(TestSupport.await(10_000, () -> page.readBatch(1).sleepers() == 1),
                            "request " + req + ": the Rust batch thread sleeps in futex (" + page.readBatch(1) + ")");
                    long frozen = work.get();
                    Thread.sleep(5);
                    assertEquals(frozen, work.get(), "no Rust batch work while the Java LC is busy");
                    // registered in sleepers is not yet blocked: a wake in between would find no waiter
                    assertTrue(TestSupport.await(10_000, () -> TestSupport.inFutexWait((int) tid.get())),
                            "request " + req + ": the Rust batch thread blocks in FUTEX_WAIT");
                    long woken = lc.woken;
                    lc.requestEnd();
                    assertEquals(woken + 1, lc.woken, "the Java LC's FUTEX_WAKE woke the Rust thread");
                    assertTrue(TestSupport.await(10_000, () -> page.readBatch(1).wakes() == wakes + 1));
                    assertTrue(TestSupport.await(10_000, () -> work.get() > frozen), "Rust batch work resumes");
                }
            } finally {
                stop.set(true);
                rust.join(10_000);
            }
            if (failure.get() != null) {
                throw failure.get();
            }
            assertEquals(0, page.readBatch(1).attached());
            assertEquals(5, page.readBatch(1).naps());
        }
    }

    @Test
    void aRustLcWakesAJavaBatchThread() throws Throwable {
        MethodHandle lcAttach = fn("elfen_lc_attach", FunctionDescriptor.of(ADDRESS, ADDRESS, JAVA_INT));
        MethodHandle begin = fn("elfen_lc_begin", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG));
        MethodHandle end = fn("elfen_lc_end", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        MethodHandle lcDetach = fn("elfen_lc_detach", FunctionDescriptor.ofVoid(ADDRESS));
        Path p = dir.resolve("r2j");
        try (Page page = Page.create(p, futexPage()); Arena a = Arena.ofConfined()) {
            MemorySegment lc = (MemorySegment) lcAttach.invokeExact(a.allocateFrom(p.toString()), 0);
            assertNotEquals(MemorySegment.NULL, lc, "elfen_lc_attach: " + lastError());
            try (InteropTest.BatchLoop loop = new InteropTest.BatchLoop(p, NapChoice.FUTEX)) {
                assertTrue(TestSupport.await(10_000, () -> loop.work.get() > 10));
                for (int r = 1; r <= 5; r++) {
                    int req = r;
                    long wakes = page.readBatch(1).wakes();
                    assertEquals(0, (int) begin.invokeExact(lc, (long) r));
                    assertTrue(TestSupport.await(10_000, () -> page.readBatch(1).sleepers() == 1),
                            "request " + req + ": the Java batch thread sleeps in futex");
                    long frozen = loop.work.get();
                    Thread.sleep(5);
                    assertEquals(frozen, loop.work.get(), "no Java batch work while the Rust LC is busy");
                    assertEquals(0, (int) end.invokeExact(lc));
                    assertTrue(TestSupport.await(10_000, () -> page.readBatch(1).wakes() == wakes + 1),
                            "the Rust LC's FUTEX_WAKE woke the Java thread");
                    assertTrue(TestSupport.await(10_000, () -> loop.work.get() > frozen));
                }
                assertEquals(5, page.readLc(0).requests());
            } finally {
                lcDetach.invokeExact(lc);
            }
            assertEquals(0, page.readLc(0).lcTid());
        }
    }

    @Test
    void rustRefusesNothingJavaWrites() throws Throwable {
        // A page written from Java opened by the Rust side as an observer (elfen_page_open validates both files).
        MethodHandle open = fn("elfen_page_open", FunctionDescriptor.of(ADDRESS, ADDRESS));
        MethodHandle destroy = fn("elfen_page_destroy", FunctionDescriptor.ofVoid(ADDRESS));
        MethodHandle lanes = fn("elfen_page_lane_count", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        try (Page golden = GoldenTest.writeGolden(dir); Arena a = Arena.ofConfined()) {
            MemorySegment h = (MemorySegment) open.invokeExact(a.allocateFrom(golden.path().toString()));
            assertNotEquals(MemorySegment.NULL, h, "elfen_page_open: " + lastError());
            assertEquals(2, (int) lanes.invokeExact(h));
            destroy.invokeExact(h);
        }
    }

    @Test
    void rustReadsHeaderLineOneAsJavaWroteIt() throws Throwable {
        // The kill switch's modes and the heartbeat fail-safe written from Java, read by the Rust side
        // (ELFEN_KILL_* and ELFEN_BATCH_* are the ordinals of KillMode and BatchMode).
        requireSymbol("elfen_page_batch_mode");
        MethodHandle open = fn("elfen_page_open", FunctionDescriptor.of(ADDRESS, ADDRESS));
        MethodHandle destroy = fn("elfen_page_destroy", FunctionDescriptor.ofVoid(ADDRESS));
        MethodHandle killMode = fn("elfen_page_kill_mode", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        MethodHandle batchMode = fn("elfen_page_batch_mode", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        Path p = dir.resolve("line1");
        try (Page page = Page.create(p, TestSupport.twoLanes(PolicyKind.BORROW_IDLE.id(), 0));
                Arena a = Arena.ofConfined()) {
            MemorySegment h = (MemorySegment) open.invokeExact(a.allocateFrom(p.toString()));
            assertNotEquals(MemorySegment.NULL, h, "elfen_page_open: " + lastError());
            try {
                for (KillMode m : KillMode.values()) {
                    page.setControl(m);
                    assertEquals(m.ordinal(), (int) killMode.invokeExact(h), m.label());
                    assertEquals(page.batchMode().ordinal(), (int) batchMode.invokeExact(h), m.label());
                }
                page.setControl(KillMode.UNMANAGED);
                page.setKill(true);
                assertEquals(KillMode.PAUSED.ordinal(), (int) killMode.invokeExact(h), "KILL wins in Rust too");
                page.setControl(KillMode.UNMANAGED);
                page.setHeartbeatStale(20_000_000L);
                Mem.release64(page.pageSegment(), Layout.Header.HEARTBEAT, PageClock.now() - 1_000_000_000L);
                assertEquals(BatchMode.STALE, page.batchMode());
                assertEquals(BatchMode.STALE.ordinal(), (int) batchMode.invokeExact(h), "stale in Rust too");
                page.beat();
                assertEquals(BatchMode.UNMANAGED.ordinal(), (int) batchMode.invokeExact(h), "fresh after a beat");
            } finally {
                destroy.invokeExact(h);
            }
        }
    }
}
