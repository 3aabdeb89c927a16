package dev.elfen;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.elfen.policy.PolicyKind;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The batch API in one thread: attach errors, the fast path, budget co-running, reconfiguration, pinning. */
class BatchThreadTest {
    @TempDir
    Path dir;

    static final BatchOptions NO_PIN = BatchOptions.defaults().withPin(false);

    private static ElfenException refused(ElfenException.Kind kind, org.junit.jupiter.api.function.Executable e,
            String... words) {
        ElfenException x = assertThrows(ElfenException.class, e);
        assertEquals(kind, x.kind(), x.getMessage());
        for (String w : words) {
            assertTrue(x.getMessage().contains(w), "'" + w + "' not in: " + x.getMessage());
        }
        return x;
    }

    @Test
    void theFastPathTakesNoSlowPathOnAnIdleLane() throws Exception {
        try (Page page = Page.create(dir.resolve("sig"), TestSupport.twoLanes(PolicyKind.BORROW_IDLE.id(), 0));
                BatchThread b = BatchThread.attach(page, 1, NO_PIN)) {
            assertEquals(1, page.readBatch(1).attached());
            assertEquals(State.NEVER, b.expected(), "the first check runs the policy");
            assertEquals(NapBackend.HYBRID, b.napBackend());
            assertEquals(NapChoice.AUTO_WHY, b.napReason());
            assertEquals(0, b.requestLane());
            assertTrue(b.describe().contains("batch lane 1 (cpu 1, not pinned) watching request lane 0 (cpu 0)"),
                    b.describe());
            b.check();
            assertEquals(page.readLc(0).state(), b.expected());
            for (int i = 0; i < 100_000; i++) {
                b.check();
            }
            assertEquals(1, b.stats().slowChecks());
            assertEquals(1, page.readBatch(1).slowChecks(), "flushed at the RUN decision");
            assertEquals(0, b.stats().naps());
        }
        // closed: attached back to 0 (the page was closed after the thread)
    }

    @Test
    void closeDetaches() throws Exception {
        try (Page page = Page.create(dir.resolve("sig"), TestSupport.twoLanes(1, 0))) {
            BatchThread b = BatchThread.attach(page, 1, NO_PIN);
            b.check();
            Thread.sleep(2);
            b.close();
            b.close();
            assertEquals(0, page.readBatch(1).attached());
            assertTrue(page.readBatch(1).runTicks() > 0, "run time flushed at detach");
            assertThrows(IllegalStateException.class, b::slowPath);
        }
    }

    @Test
    void theMappingsOutliveAClosedPageUntilTheLastHandleCloses() throws Exception {
        Path p = dir.resolve("sig");
        Page page = Page.create(p, TestSupport.twoLanes(1, 0));
        page.persist();
        LcLane lc = LcLane.attach(page, 0);
        BatchThread b = BatchThread.attach(page, 1, NO_PIN);
        page.close();
        assertTrue(page.isClosed());
        assertThrows(IllegalStateException.class, () -> LcLane.attach(page, 0), "no new handles on a closed page");
        b.check();
        lc.requestBegin(1);
        lc.requestEnd();
        b.check();
        assertEquals(2, b.stats().slowChecks(), "both handles still work on the mappings");
        lc.close();
        b.close();
        // a check after close reaches the slow path and says so, instead of touching unmapped memory
        IllegalStateException e = assertThrows(IllegalStateException.class, b::check);
        assertTrue(e.getMessage().contains("closed"), e.getMessage());
        assertThrows(IllegalStateException.class, () -> page.readLc(0), "unmapped after the last close");
        Page.remove(p);
    }

    @Test
    void aBudgetPolicyCoRunsWithEveryCheckOnTheSlowPath() throws Exception {
        try (Page page = Page.create(dir.resolve("sig"), TestSupport.twoLanes(PolicyKind.FIXED_BUDGET.id(),
                60_000_000_000L)); LcLane lc = LcLane.attach(page, 0);
                BatchThread b = BatchThread.attach(page, 1, NO_PIN)) {
            b.check(); // idle, empty queue: a new period
            long idle = b.expected();
            lc.requestBegin(1);
            b.check(); // busy: co-run on the budget
            assertEquals(State.NEVER, b.expected(), "co-running: every check takes the slow path");
            long before = b.stats().slowChecks();
            for (int i = 0; i < 10; i++) {
                b.check();
            }
            assertEquals(before + 10, b.stats().slowChecks());
            Thread.sleep(2);
            lc.requestEnd();
            b.check();
            assertTrue(b.expected() != State.NEVER && b.expected() != idle);
            BatchLineSnapshot s = page.readBatch(1);
            assertTrue(s.corunTicks() >= 2_000_000, "co-run time accounted: " + s.corunTicks());
            assertEquals(b.stats().slowChecks(), s.slowChecks());
            assertEquals(0, s.naps());
        }
    }

    @Test
    void theControllerReconfiguresUnderTheSeqlock() throws Exception {
        PageSpec spec = TestSupport.twoLanes(PolicyKind.BORROW_IDLE.id(), 0);
        try (Page page = Page.create(dir.resolve("sig"), spec); LcLane lc = LcLane.attach(page, 0);
                BatchThread b = BatchThread.attach(page, 1, NO_PIN)) {
            b.check();
            page.writeController(1, spec.lanes().get(1).withPolicy(PolicyKind.UNMANAGED.id()).withNap(Layout.Nap.SPIN)
                    .withHybridSpinNs(1234));
            lc.requestBegin(1);
            b.check(); // borrow idle would nap here; the new policy runs
            assertEquals(PolicyKind.UNMANAGED, b.policy().kind());
            assertEquals(NapBackend.SPIN, b.napBackend());
            assertEquals(0, b.stats().configRejects());
            // an unavailable backend and an unknown policy are refused, the old ones kept
            page.writeController(1, spec.lanes().get(1).withPolicy(PolicyKind.UNMANAGED.id())
                    .withNap(Layout.Nap.UMWAIT));
            lc.requestEnd();
            b.check();
            assertEquals(1, b.stats().configRejects());
            assertEquals(NapBackend.SPIN, b.napBackend());
            long seqOff = Layout.controllerLine(1) + Layout.ControllerLine.CONFIG_SEQ;
            MemorySegment p = page.pageSegment();
            int s = Mem.get32(p, seqOff);
            Mem.set32(p, seqOff, s + 1);
            Mem.set32(p, Layout.controllerLine(1) + Layout.ControllerLine.POLICY, 99);
            Mem.release32(p, seqOff, s + 2);
            lc.requestBegin(2);
            b.check();
            // the unknown policy, and the umwait still in the line (as in Rust, a refused
            // backend is refused again at every reload until the controller changes it)
            assertEquals(3, b.stats().configRejects());
            assertEquals(PolicyKind.UNMANAGED, b.policy().kind());
        }
    }

    @Test
    void attachErrors() throws Exception {
        Path path = dir.resolve("sig");
        PageSpec spec = TestSupport.twoLanes(1, 0);
        try (Page page = Page.create(path, spec)) {
            refused(ElfenException.Kind.BATCH_ON_REQUEST_LANE, () -> BatchThread.attach(page, 0, NO_PIN),
                    "lane 0 of signal page " + path + " is a request lane", "its batch lane is 1");
            refused(ElfenException.Kind.LANE_OUT_OF_RANGE, () -> BatchThread.attach(page, 5, NO_PIN));
            refused(ElfenException.Kind.NAP_UNAVAILABLE, () -> BatchThread.attach(page, 1,
                    NO_PIN.withNap(NapChoice.UMWAIT)), "umwait is unavailable", "Java cannot execute");
            try (Page lcp = Page.attach(path, Access.LC)) {
                refused(ElfenException.Kind.READ_ONLY, () -> BatchThread.attach(lcp, 1, NO_PIN),
                        "read-only for the batch segment this batch thread writes", "batch or controller");
            }
            page.writeController(1, spec.lanes().get(1).withPolicy(9));
            refused(ElfenException.Kind.UNKNOWN_POLICY, () -> BatchThread.attach(page, 1, NO_PIN),
                    "unknown policy id 9");
            page.writeController(1, spec.lanes().get(1).withNap(Layout.Nap.MWAITX));
            refused(ElfenException.Kind.NAP_UNAVAILABLE, () -> BatchThread.attach(page, 1, NO_PIN), "mwaitx");
            // an id written past writeController's checks is still caught at attach
            Mem.set32(page.pageSegment(), Layout.controllerLine(1) + Layout.ControllerLine.NAP, 9);
            refused(ElfenException.Kind.UNKNOWN_NAP, () -> BatchThread.attach(page, 1, NO_PIN),
                    "unknown nap backend id 9");
            page.writeController(1, spec.lanes().get(1));
            page.writeController(0, new LaneSpec(0, Layout.Role.UNUSED, List.of(), 0, 0, 0, 0, 0));
            refused(ElfenException.Kind.BAD_LANE, () -> BatchThread.attach(page, 1, NO_PIN),
                    "its partner, lane 0, is not a request lane");
            assertEquals(0, page.readBatch(1).attached(), "failed attaches leave no trace");
        }
    }

    @Test
    void anotherThreadMayNotRunTheSlowPath() throws Exception {
        try (Page page = Page.create(dir.resolve("sig"), TestSupport.twoLanes(1, 0));
                BatchThread b = BatchThread.attach(page, 1, NO_PIN)) {
            AtomicReference<Throwable> got = new AtomicReference<>();
            Thread t = new Thread(() -> {
                try {
                    b.check();
                } catch (Throwable x) {
                    got.set(x);
                }
            });
            t.start();
            t.join();
            assertTrue(got.get() instanceof IllegalStateException x && x.getMessage().contains("attaching thread"),
                    String.valueOf(got.get()));
        }
    }

    private static boolean hasCpu(MemorySegment mask, int cpu) {
        return (mask.get(ValueLayout.JAVA_BYTE, cpu / 8) & (1 << (cpu % 8))) != 0;
    }

    private static int countCpus(MemorySegment mask) {
        int n = 0;
        for (long i = 0; i < mask.byteSize(); i++) {
            n += Integer.bitCount(mask.get(ValueLayout.JAVA_BYTE, i) & 0xFF);
        }
        return n;
    }

    @Test
    void pinningPinsToTheLaneCpuAndRestores() throws Exception {
        AtomicReference<Throwable> failure = new AtomicReference<>();
        AtomicReference<String> skipped = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try (Page page = Page.create(dir.resolve("sig"), TestSupport.twoLanes(1, 0)); Arena a = Arena.ofConfined()) {
                int tid = Native.gettid();
                MemorySegment before = a.allocate(Native.CPU_MASK_BYTES, 8);
                assertEquals(0, Native.getAffinity(tid, before));
                if (!hasCpu(before, 1)) {
                    skipped.set("needs cpus:2: cpu 1 is not in this thread's affinity");
                    return;
                }
                try (BatchThread b = BatchThread.attach(page, 1, BatchOptions.defaults())) {
                    assertTrue(b.pinned());
                    MemorySegment now = a.allocate(Native.CPU_MASK_BYTES, 8);
                    assertEquals(0, Native.getAffinity(tid, now));
                    assertTrue(hasCpu(now, 1) && countCpus(now) == 1, "pinned to cpu 1 alone");
                }
                MemorySegment after = a.allocate(Native.CPU_MASK_BYTES, 8);
                assertEquals(0, Native.getAffinity(tid, after));
                assertEquals(-1, before.mismatch(after), "affinity restored at close");
                // a CPU that does not exist is refused with the OS's reason, affinity untouched
                page.writeController(1, TestSupport.twoLanes(1, 0).lanes().get(1));
                LaneSpec far = new LaneSpec(4000, Layout.Role.BATCH, List.of(0), 1, 0, 0, 50_000, 0);
                page.writeController(1, far);
                ElfenException e = assertThrows(ElfenException.class,
                        () -> BatchThread.attach(page, 1, BatchOptions.defaults()));
                assertEquals(ElfenException.Kind.PIN, e.kind(), e.getMessage());
                assertTrue(e.getMessage().contains("cpu 4000") && e.getMessage().contains("sched_setaffinity"),
                        e.getMessage());
                assertEquals(0, page.readBatch(1).attached());
                MemorySegment end = a.allocate(Native.CPU_MASK_BYTES, 8);
                assertEquals(0, Native.getAffinity(tid, end));
                assertEquals(-1, before.mismatch(end));
            } catch (Throwable x) {
                failure.set(x);
            }
        });
        t.start();
        t.join();
        if (failure.get() != null) {
            throw new AssertionError(failure.get());
        }
        Assumptions.assumeTrue(skipped.get() == null, skipped.get());
    }

    @Test
    void dynamicRefreshSaysItHasNoCounters() throws Exception {
        try (Page page = Page.create(dir.resolve("sig"), TestSupport.twoLanes(PolicyKind.DYNAMIC_REFRESH.id(), 1000));
                BatchThread b = BatchThread.attach(page, 1, NO_PIN)) {
            assertTrue(b.ipcNote().contains("behaves as refresh budget"), b.ipcNote());
            assertTrue(b.describe().contains("budget 1 µs"), b.describe());
        }
        try (Page page = Page.create(dir.resolve("sig2"), TestSupport.twoLanes(1, 0));
                BatchThread b = BatchThread.attach(page, 1, NO_PIN)) {
            assertNull(b.ipcNote());
        }
    }
}
