package dev.elfen;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.elfen.policy.PolicyKind;
import java.nio.file.Path;
import java.util.OptionalLong;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Header line 1 from Java: the kill switch's modes ({@link KillMode}) and the
 * heartbeat fail-safe ({@link BatchMode}) — the rule, the page calls, and a
 * Java LC thread with a Java batch thread (spin and futex naps): mode
 * unmanaged runs batch work on a busy lane, KILL still pauses it, clearing it
 * restores borrow idle; a stale heartbeat pauses batch work on an idle lane
 * until a beat; with the fail-safe off an old heartbeat changes nothing.
 */
@SuppressWarnings("try")
class FailsafeTest {
    @TempDir
    Path dir;

    private static final long S = 1_000_000_000L;

    @Test
    void killModesRoundTripAndKillWins() {
        for (KillMode m : KillMode.values()) {
            assertEquals(m, KillMode.fromControl(m.bits()));
            assertEquals(m, KillMode.parse(m.label()));
        }
        assertEquals(KillMode.PAUSED, KillMode.fromControl(Layout.Control.KILL | Layout.Control.UNMANAGED));
        assertEquals(KillMode.OFF, KillMode.fromControl(1L << 40), "unknown bits do not change the mode");
        assertEquals(KillMode.UNMANAGED, KillMode.parse(" Unmanaged "));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> KillMode.parse("stop"));
        assertTrue(e.getMessage().contains("\"stop\"") && e.getMessage().contains("unmanaged"), e.getMessage());
    }

    @Test
    void batchModeFollowsRustsRule() {
        // off: never stale; on: never beat = stale; the bound itself is fresh
        assertFalse(BatchMode.heartbeatStale(1, 0, Long.MAX_VALUE, S));
        assertTrue(BatchMode.heartbeatStale(0, 10, 5, S));
        assertFalse(BatchMode.heartbeatStale(1_000, 500, 1_500, S));
        assertTrue(BatchMode.heartbeatStale(1_000, 500, 1_501, S));
        assertFalse(BatchMode.heartbeatStale(2_000, 1, 1_000, S), "a beat after now is fresh");
        // ticks converted: 2,000 ticks at 2 GHz = 1 µs
        assertFalse(BatchMode.heartbeatStale(10_000, 1_000, 12_000, 2 * S));
        assertTrue(BatchMode.heartbeatStale(10_000, 1_000, 12_002, 2 * S));
        long k = Layout.Control.KILL;
        long u = Layout.Control.UNMANAGED;
        assertEquals(BatchMode.MANAGED, BatchMode.of(0, 1_000, 100, 1_050, S));
        assertEquals(BatchMode.UNMANAGED, BatchMode.of(u, 1_000, 100, 1_050, S));
        assertEquals(BatchMode.KILLED, BatchMode.of(k | u, 1_000, 100, 1_050, S));
        assertEquals(BatchMode.STALE, BatchMode.of(0, 1_000, 100, 2_000, S));
        assertEquals(BatchMode.STALE, BatchMode.of(u, 1_000, 100, 2_000, S), "the fail-safe wins over UNMANAGED");
        assertEquals(BatchMode.KILLED, BatchMode.of(k, 1_000, 100, 2_000, S), "KILL wins over the fail-safe");
        assertTrue(BatchMode.KILLED.paused() && BatchMode.STALE.paused());
        assertFalse(BatchMode.MANAGED.paused() || BatchMode.UNMANAGED.paused());
    }

    @Test
    void pageCallsSetAndReadHeaderLineOne() throws Exception {
        Path p = dir.resolve("calls");
        try (Page page = Page.create(p, TestSupport.twoLanes(PolicyKind.BORROW_IDLE.id(), 0));
                Page obs = Page.attach(p, Access.OBSERVER)) {
            assertEquals(KillMode.OFF, obs.killMode());
            page.setControl(KillMode.UNMANAGED);
            assertEquals(Layout.Control.UNMANAGED, obs.control());
            assertEquals(BatchMode.UNMANAGED, obs.batchMode());
            page.setKill(true);
            assertEquals(Layout.Control.KILL | Layout.Control.UNMANAGED, obs.control(), "setKill keeps UNMANAGED");
            assertEquals(KillMode.PAUSED, obs.killMode());
            page.setControl(KillMode.PAUSED);
            assertEquals(Layout.Control.KILL, obs.control());
            page.setUnmanaged(true);
            page.setControl(KillMode.OFF);
            assertEquals(0, obs.control());
            Mem.set64(page.pageSegment(), Layout.Header.CONTROL, 1L << 7);
            page.setControl(KillMode.PAUSED);
            assertEquals((1L << 7) | Layout.Control.KILL, obs.control(), "other bits survive");
            page.setControl(KillMode.OFF);

            assertEquals(OptionalLong.empty(), obs.heartbeatAgeNs());
            assertFalse(obs.heartbeatStale());
            page.setHeartbeatStale(S);
            assertEquals(S, obs.heartbeatStaleNs());
            assertTrue(obs.heartbeatAgeNs().getAsLong() < S, "turning the fail-safe on beats");
            Mem.release64(page.pageSegment(), Layout.Header.HEARTBEAT, PageClock.now() - 2 * S);
            assertTrue(obs.heartbeatAgeNs().getAsLong() >= 2 * S);
            assertTrue(obs.heartbeatStale());
            assertEquals(BatchMode.STALE, obs.batchMode());
            page.beat();
            assertFalse(obs.heartbeatStale());
            page.setHeartbeatStale(0);
            assertEquals(0, obs.heartbeatStaleNs());

            for (org.junit.jupiter.api.function.Executable e : new org.junit.jupiter.api.function.Executable[] {
                () -> obs.setControl(KillMode.PAUSED), () -> obs.setUnmanaged(true), () -> obs.beat(),
                () -> obs.setHeartbeatStale(1)}) {
                ElfenException x = assertThrows(ElfenException.class, e);
                assertEquals(ElfenException.Kind.READ_ONLY, x.kind(), x.getMessage());
            }
        }
    }

    private static boolean nappingSince(Page page, long naps0) {
        BatchLineSnapshot b = page.readBatch(1);
        return b.napping() == 1 && b.naps() > naps0;
    }

    /** No batch work for {@code ms} milliseconds. */
    private static void assertStill(InteropTest.BatchLoop loop, long ms, String why) throws InterruptedException {
        long w = loop.work.get();
        Thread.sleep(ms);
        assertEquals(w, loop.work.get(), "batch work ran " + why);
    }

    private static void awaitWork(InteropTest.BatchLoop loop, String what, Runnable meanwhile)
            throws InterruptedException {
        long w = loop.work.get();
        assertTrue(TestSupport.await(10_000, () -> {
            meanwhile.run();
            return loop.work.get() > w + 100;
        }), what);
    }

    private void unmanaged(NapChoice nap) throws Exception {
        Path p = dir.resolve("unmanaged-" + nap.label());
        try (Page page = Page.create(p, TestSupport.twoLanes(PolicyKind.BORROW_IDLE.id(), 0));
                LcLane lc = LcLane.attach(page, 0);
                InteropTest.BatchLoop loop = new InteropTest.BatchLoop(p, nap, BatchOptions.DEFAULT_FUTEX_TIMEOUT)) {
            awaitWork(loop, "batch work on the idle lane", () -> {});
            long n = page.readBatch(1).naps();
            lc.requestBegin(1);
            assertTrue(TestSupport.await(10_000, () -> nappingSince(page, n)), "borrow idle naps on a busy lane");
            assertStill(loop, 10, "on a busy lane under borrow idle");

            page.setControl(KillMode.UNMANAGED);
            awaitWork(loop, "unmanaged: batch work on the busy lane", () -> {});
            assertEquals(0, page.readBatch(1).napping());

            page.setKill(true);
            long n2 = page.readBatch(1).naps();
            lc.requestEnd();
            assertTrue(TestSupport.await(10_000, () -> nappingSince(page, n2)), "KILL over UNMANAGED naps");
            assertStill(loop, 20, "with KILL and UNMANAGED set");
            page.setKill(false);
            awaitWork(loop, "KILL cleared: unmanaged batch work again", () -> {});

            page.setControl(KillMode.OFF);
            long n3 = page.readBatch(1).naps();
            lc.requestBegin(2);
            assertTrue(TestSupport.await(10_000, () -> nappingSince(page, n3)), "the policy is back");
            assertStill(loop, 10, "on a busy lane after unmanaged was cleared");
            lc.requestEnd();
            awaitWork(loop, "batch work on the idle lane again", () -> {});
        }
    }

    @Test
    void unmanagedRunsASpinningBatchThreadOnABusyLane() throws Exception {
        unmanaged(NapChoice.SPIN);
    }

    @Test
    void unmanagedRunsASleepingBatchThreadOnABusyLane() throws Exception {
        unmanaged(NapChoice.FUTEX);
    }

    private void stale(NapChoice nap) throws Exception {
        Path p = dir.resolve("stale-" + nap.label());
        try (Page page = Page.create(p, TestSupport.twoLanes(PolicyKind.BORROW_IDLE.id(), 0));
                LcLane lc = LcLane.attach(page, 0)) {
            // the fail-safe on (20 ms), the heartbeat 1 s old: a thread attaching now pauses at its first check
            page.setHeartbeatStale(20_000_000L);
            Mem.release64(page.pageSegment(), Layout.Header.HEARTBEAT, PageClock.now() - S);
            try (InteropTest.BatchLoop loop = new InteropTest.BatchLoop(p, nap, BatchOptions.DEFAULT_FUTEX_TIMEOUT)) {
                assertTrue(TestSupport.await(10_000, () -> nappingSince(page, 0)), "a stale page pauses at attach");
                assertStill(loop, 30, "with a stale heartbeat on an idle lane");
                Runnable beat = () -> {
                    try {
                        page.beat();
                    } catch (ElfenException e) {
                        throw new AssertionError(e);
                    }
                };
                awaitWork(loop, "a beat (kept up) ends the pause", beat);

                // the controller falls silent: noticed at the next slow path
                Mem.release64(page.pageSegment(), Layout.Header.HEARTBEAT, PageClock.now() - S);
                long n = page.readBatch(1).naps();
                lc.requestBegin(1);
                lc.requestEnd();
                assertTrue(TestSupport.await(10_000, () -> nappingSince(page, n)), "stale: naps after a request");
                assertStill(loop, 30, "with a stale heartbeat after a request");
                awaitWork(loop, "the controller beats again", beat);

                // with the fail-safe off an old heartbeat changes nothing
                page.setHeartbeatStale(0);
                Mem.release64(page.pageSegment(), Layout.Header.HEARTBEAT, PageClock.now() - 10 * S);
                lc.requestBegin(2);
                lc.requestEnd();
                awaitWork(loop, "fail-safe off: batch work after a request", () -> {});
                assertEquals(0, page.readBatch(1).napping());
            } finally {
                page.setHeartbeatStale(0);
            }
        }
    }

    @Test
    void aStaleHeartbeatPausesASpinningBatchThreadUntilABeat() throws Exception {
        stale(NapChoice.SPIN);
    }

    @Test
    void aStaleHeartbeatPausesASleepingBatchThreadUntilABeat() throws Exception {
        stale(NapChoice.FUTEX);
    }

    @Test
    void aTscPageHasNoJavaHeartbeatAge() throws Exception {
        // Java observers read TSC pages but cannot read their clock
        Path p = dir.resolve("tsc");
        try (Page page = Page.create(p, TestSupport.twoLanes(1, 0))) {
            Mem.set32(page.pageSegment(), Layout.Header.CLOCK, Layout.Clock.TSC);
            page.beat();
            Assumptions.assumeTrue(Page.InvariantTsc.PRESENT,
                    "needs hardware:invariant-tsc: a TSC page does not attach without it");
            try (Page obs = Page.attach(p, Access.OBSERVER)) {
                assertEquals(Layout.Clock.TSC, obs.clockKind());
                IllegalStateException e = assertThrows(IllegalStateException.class, obs::heartbeatAgeNs);
                assertTrue(e.getMessage().contains("TSC"), e.getMessage());
                assertEquals(BatchMode.MANAGED, obs.batchMode(), "without the fail-safe no clock is needed");
            }
        }
    }

}
