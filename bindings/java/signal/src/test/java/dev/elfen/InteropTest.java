package dev.elfen;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.elfen.policy.PolicyKind;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A Java LC thread and a Java batch thread on one page (in a temporary
 * directory): the batch thread naps while the LC is busy and wakes at the
 * end. The futex timeout is the longest allowed (1 s) and the LC's FUTEX_WAKE
 * syscalls are counted, so a lost wakeup cannot hide behind a timeout.
 */
@SuppressWarnings("try")
class InteropTest {
    @TempDir
    Path dir;

    /** A batch loop on its own platform thread: check() and count work until stopped. */
    static final class BatchLoop implements AutoCloseable {
        final AtomicLong work = new AtomicLong();
        final AtomicBoolean stop = new AtomicBoolean();
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        final AtomicReference<BatchStats> stats = new AtomicReference<>();
        final Thread thread;
        /** The batch thread's kernel thread id (set before the constructor returns). */
        volatile int tid;

        BatchLoop(Path page, NapChoice nap) throws InterruptedException {
            this(page, nap, Duration.ofSeconds(1));
        }

        BatchLoop(Path page, NapChoice nap, Duration futexTimeout) throws InterruptedException {
            java.util.concurrent.CountDownLatch attached = new java.util.concurrent.CountDownLatch(1);
            thread = new Thread(() -> {
                BatchOptions o = BatchOptions.defaults().withPin(false).withNap(nap)
                        .withFutexTimeout(futexTimeout);
                tid = TestSupport.gettid();
                try (BatchThread b = BatchThread.open(page, 1, o)) {
                    attached.countDown();
                    while (!stop.get()) {
                        b.check();
                        work.incrementAndGet();
                    }
                    stats.set(b.stats());
                } catch (Throwable t) {
                    failure.set(t);
                    attached.countDown();
                }
            }, "batch-loop");
            thread.start();
            attached.await();
        }

        @Override
        public void close() {
            stop.set(true);
            try {
                thread.join(10_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new AssertionError("interrupted joining the batch thread", e);
            }
            if (failure.get() != null) {
                throw new AssertionError("batch thread failed", failure.get());
            }
        }
    }

    private static void napsWhileBusyAndWakesAtEnd(Path p, NapChoice nap, int requests) throws Exception {
        try (Page page = Page.create(p, TestSupport.twoLanes(PolicyKind.BORROW_IDLE.id(), 0));
                LcLane lc = LcLane.attach(page, 0); BatchLoop loop = new BatchLoop(p, nap)) {
            assertTrue(TestSupport.await(10_000, () -> loop.work.get() > 1000), "the batch thread runs while idle");
            for (int r = 1; r <= requests; r++) {
                long wakesBefore = page.readBatch(1).wakes();
                lc.requestBegin(r);
                boolean futex = nap == NapChoice.FUTEX;
                // borrow idle: the batch thread naps at its next check
                assertTrue(TestSupport.await(10_000, () -> page.readBatch(1).napping() == 1
                        && (!futex || page.readBatch(1).sleepers() == 1)), "request " + r + ": the batch thread naps ("
                        + page.readBatch(1) + ")");
                long frozen = loop.work.get();
                Thread.sleep(5);
                assertEquals(frozen, loop.work.get(), "no batch work while the LC is busy");
                if (futex) {
                    // registered in sleepers is not yet blocked: a wake in between would find no waiter
                    // (and the nap would not block at all), so woken could not count it
                    assertTrue(TestSupport.await(10_000, () -> TestSupport.inFutexWait(loop.tid)),
                            "request " + r + ": the batch thread blocks in FUTEX_WAIT");
                }
                long wakeCalls = lc.wakeSyscalls;
                lc.requestEnd();
                if (futex) {
                    assertEquals(wakeCalls + 1, lc.wakeSyscalls, "the LC saw the sleeper and made one FUTEX_WAKE");
                    assertTrue(lc.woken >= 1, "FUTEX_WAKE woke the batch thread");
                } else {
                    assertEquals(wakeCalls, lc.wakeSyscalls, "no sleeper: no syscall");
                }
                assertTrue(TestSupport.await(10_000, () -> page.readBatch(1).wakes() == wakesBefore + 1
                        && page.readBatch(1).napping() == 0), "request " + r + ": the batch thread wakes");
                long resumed = loop.work.get();
                assertTrue(TestSupport.await(10_000, () -> loop.work.get() > resumed), "batch work resumes");
            }
            if (nap == NapChoice.FUTEX) {
                assertEquals(requests, lc.woken, "one waiter woken per request end");
            }
            loop.close(); // stop the batch thread now to read its final stats (closing again is harmless)
            BatchStats s = loop.stats.get();
            assertEquals(requests, s.naps());
            assertEquals(requests, s.wakes());
            BatchLineSnapshot line = page.readBatch(1);
            assertEquals(requests, line.naps());
            assertEquals(requests, line.wakes());
            assertEquals(0, line.sleepers());
            assertEquals(0, line.attached());
            assertTrue(line.lastChange() > 0 && line.runTicks() > 0);
            assertEquals(requests, page.readLc(0).requests());
        }
    }

    @Test
    void futexNapWakesAcrossThreads() throws Exception {
        napsWhileBusyAndWakesAtEnd(dir.resolve("futex"), NapChoice.FUTEX, 20);
    }

    @Test
    void spinNapWakesWithoutASyscall() throws Exception {
        napsWhileBusyAndWakesAtEnd(dir.resolve("spin"), NapChoice.SPIN, 5);
    }

    @Test
    void hybridNapBlocksAfterItsSpinBound() throws Exception {
        Path p = dir.resolve("hybrid");
        try (Page page = Page.create(p, TestSupport.twoLanes(PolicyKind.BORROW_IDLE.id(), 0));
                LcLane lc = LcLane.attach(page, 0); BatchLoop loop = new BatchLoop(p, NapChoice.HYBRID)) {
            assertTrue(TestSupport.await(10_000, () -> loop.work.get() > 0));
            lc.requestBegin(1);
            // 50 µs of spinning, then the futex: a sleeper appears
            assertTrue(TestSupport.await(10_000, () -> page.readBatch(1).sleepers() == 1), "hybrid falls back to futex");
            lc.requestEnd();
            assertTrue(TestSupport.await(10_000, () -> page.readBatch(1).wakes() == 1));
            assertEquals(1, lc.wakeSyscalls);
        }
    }

    @Test
    void theKillSwitchStopsBatchWorkUntilCleared() throws Exception {
        Path p = dir.resolve("kill");
        try (Page page = Page.create(p, TestSupport.twoLanes(PolicyKind.UNMANAGED.id(), 0));
                LcLane lc = LcLane.attach(page, 0); BatchLoop loop = new BatchLoop(p, NapChoice.FUTEX)) {
            assertTrue(TestSupport.await(10_000, () -> loop.work.get() > 0));
            page.setKill(true);
            // obeyed at the next slow path: any request begin or end
            lc.requestBegin(1);
            lc.requestEnd();
            assertTrue(TestSupport.await(10_000, () -> page.readBatch(1).napping() == 1), "killed: the thread naps");
            long frozen = loop.work.get();
            lc.requestBegin(2); // state changes wake the nap, the kill switch sends it back
            lc.requestEnd();
            Thread.sleep(20);
            assertTrue(TestSupport.await(10_000, () -> page.readBatch(1).napping() == 1));
            assertEquals(frozen, loop.work.get(), "no batch work while killed");
            page.setKill(false);
            // a change of the control word ends the nap (the futex nap re-reads it at its timeout)
            assertTrue(TestSupport.await(10_000, () -> loop.work.get() > frozen), "batch work resumes when cleared");
        }
    }
}
