package dev.elfen;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The LC API: what each call stores, the lc_tid claim, and the attach errors. */
class LcLaneTest {
    @TempDir
    Path dir;

    @Test
    void beginEndAndQueueLengthStoreTheProtocolsValues() throws Exception {
        try (Page page = Page.create(dir.resolve("sig"), TestSupport.twoLanes(1, 0));
                LcLane lc = LcLane.attach(page, 0)) {
            assertEquals(Native.gettid(), page.readLc(0).lcTid(), "lc_tid is the attaching thread");
            assertEquals(lc.tid(), page.readLc(0).lcTid());
            long t0 = PageClock.now();
            lc.requestBegin(42);
            LcLineSnapshot s = page.readLc(0);
            assertEquals(State.pack(true, 1, 0), s.state());
            assertEquals(42, s.requestId());
            assertTrue(s.busySince() >= t0 && s.busySince() <= PageClock.now(), "busy_since is the page clock");
            assertTrue(lc.isBusy());
            lc.setQueueLen(3);
            assertEquals(State.pack(true, 1, 3), page.readLc(0).state());
            lc.requestEnd();
            s = page.readLc(0);
            assertEquals(State.pack(false, 1, 3), s.state());
            assertEquals(1, s.requests());
            assertTrue(s.busyTicks() >= 0 && s.busyTicks() <= PageClock.now() - t0);
            lc.requestEnd(); // a no-op
            assertEquals(1, page.readLc(0).requests());
            // a begin while busy completes the open request without an idle gap
            lc.requestBegin(7);
            lc.requestBegin(8);
            s = page.readLc(0);
            assertEquals(State.pack(true, 3, 3), s.state());
            assertEquals(8, s.requestId());
            assertEquals(2, s.requests());
            lc.setQueueLen(-1); // u32::MAX saturates below NEVER
            assertEquals(State.MAX_QUEUE_LEN, State.queueLen(page.readLc(0).state()));
        }
    }

    @Test
    void closeEndsAnOpenRequestAndReleasesTheLane() throws Exception {
        try (Page page = Page.create(dir.resolve("sig"), TestSupport.twoLanes(1, 0))) {
            LcLane lc = LcLane.attach(page, 0);
            lc.requestBegin(1);
            lc.close();
            assertFalse(State.busy(page.readLc(0).state()));
            assertEquals(0, page.readLc(0).lcTid());
            lc.close(); // idempotent
            try (LcLane again = LcLane.attach(page, 0)) {
                assertEquals(1, again.seq(), "the shadow resumes from the line");
            }
        }
    }

    @Test
    @SuppressWarnings("try")
    void aLaneServedByALiveThreadIsTaken() throws Exception {
        try (Page page = Page.create(dir.resolve("sig"), TestSupport.twoLanes(1, 0));
                LcLane lc = LcLane.attach(page, 0)) {
            // the same thread twice
            ElfenException e = assertThrows(ElfenException.class, () -> LcLane.attach(page, 0));
            assertEquals(ElfenException.Kind.LANE_TAKEN, e.kind());
            assertTrue(e.getMessage().contains("already has an LC thread (tid " + lc.tid()), e.getMessage());
            // another thread
            AtomicReference<Throwable> other = new AtomicReference<>();
            Thread t = new Thread(() -> {
                try (LcLane x = LcLane.attach(page, 0)) {
                    other.set(null);
                } catch (Throwable x) {
                    other.set(x);
                }
            });
            t.start();
            t.join();
            assertTrue(other.get() instanceof ElfenException x && x.kind() == ElfenException.Kind.LANE_TAKEN,
                    String.valueOf(other.get()));
        }
    }

    @Test
    void aDeadLcThreadsLaneAndOpenRequestAreTakenOver() throws Exception {
        try (Page page = Page.create(dir.resolve("sig"), TestSupport.twoLanes(1, 0))) {
            long lc = Layout.lcLine(0);
            // a thread id that exists in no process, and a request it left open
            int dead = Integer.MAX_VALUE - 7;
            assertFalse(Native.alive(dead));
            Mem.set32(page.pageSegment(), lc + Layout.LcLine.LC_TID, dead);
            Mem.release64(page.pageSegment(), lc + Layout.LcLine.STATE, State.pack(true, 9, 2));
            try (LcLane l = LcLane.attach(page, 0)) {
                assertEquals(State.pack(false, 9, 2), page.readLc(0).state(), "the open request is ended");
                assertEquals(l.tid(), page.readLc(0).lcTid());
                assertEquals(9, l.seq());
                assertEquals(2, l.queueLen());
            }
        }
    }

    @Test
    void attachErrors() throws Exception {
        Path p = dir.resolve("sig");
        try (Page page = Page.create(p, TestSupport.twoLanes(1, 0))) {
            ElfenException e = assertThrows(ElfenException.class, () -> LcLane.attach(page, 1));
            assertEquals(ElfenException.Kind.LC_ON_BATCH_LANE, e.kind());
            assertTrue(e.getMessage().contains("lane 1 of signal page " + p + " is a batch lane (partner of request"
                    + " lane 0); an LC thread attaches to a request lane (here lane 0)"), e.getMessage());
            e = assertThrows(ElfenException.class, () -> LcLane.attach(page, 2));
            assertEquals(ElfenException.Kind.LANE_OUT_OF_RANGE, e.kind());
            try (Page b = Page.attach(p, Access.BATCH)) {
                e = assertThrows(ElfenException.class, () -> LcLane.attach(b, 0));
                assertEquals(ElfenException.Kind.READ_ONLY, e.kind());
                assertTrue(e.getMessage().contains("read-only for the page file this LC lane writes"), e.getMessage());
            }
            page.writeController(1, new LaneSpec(1, Layout.Role.UNUSED, java.util.List.of(), 0, 0, 0, 0, 0));
            page.writeController(0, new LaneSpec(0, Layout.Role.UNUSED, java.util.List.of(), 0, 0, 0, 0, 0));
            e = assertThrows(ElfenException.class, () -> LcLane.attach(page, 0));
            assertEquals(ElfenException.Kind.BAD_LANE, e.kind());
            assertTrue(e.getMessage().contains("role 0 (unused)"), e.getMessage());
        }
        ElfenException e2 = assertThrows(ElfenException.class, () -> LcLane.open(p, 0));
        assertEquals(ElfenException.Kind.MISSING, e2.kind());
    }

    @Test
    @SuppressWarnings("try")
    void virtualThreadsAreRefused() throws Exception {
        try (Page page = Page.create(dir.resolve("sig"), TestSupport.twoLanes(1, 0))) {
            AtomicReference<Throwable> got = new AtomicReference<>();
            Thread.ofVirtual().start(() -> {
                try (LcLane l = LcLane.attach(page, 0)) {
                    got.set(null);
                } catch (Throwable t) {
                    got.set(t);
                }
            }).join();
            assertTrue(got.get() instanceof ElfenException x && x.kind() == ElfenException.Kind.WRONG_THREAD
                    && x.getMessage().contains("virtual thread"), String.valueOf(got.get()));
        }
    }
}
