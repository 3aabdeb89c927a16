package dev.elfen;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The golden vectors testdata/signal/v2-2lanes.{page,batch}.bin (the page
 * file and the batch segment's bytes): read every field the JSON lists
 * through the Java API, and write the same page from Java and compare the
 * bytes (byte-compatible with Rust and C; the segment id, which the kernel
 * picks, set to the vectors' value first).
 */
class GoldenTest {
    @TempDir
    Path dir;

    private static long parseU64(Object v) {
        return Long.parseUnsignedLong((String) v);
    }

    @Test
    void everyJsonFieldReadsThroughTheApi() throws Exception {
        try (TestSupport.GoldenCopy g = TestSupport.copyGolden(dir, "copy");
                Page page = Page.attach(g.path(), Access.OBSERVER, 2)) {
            byte[][] golden = TestSupport.goldenBytes(page);
            byte[] pageBytes = golden[0];
            byte[] batchBytes = golden[1];
            boolean[][] covered = {new boolean[pageBytes.length], new boolean[batchBytes.length]};
            assertEquals(g.shmid(), page.batchShmid());
            assertEquals(Layout.Clock.MONOTONIC_NS, page.clockKind());
            assertEquals(1_000_000_000L, page.ticksPerSec());
            assertEquals(0x0123_4567_89AB_CDEFL, page.instance());
            assertEquals(4242, page.creatorPid());
            assertEquals(1_790_000_000L, page.createdUnixS());
            assertEquals(5_400_000_000L, page.heartbeat());
            assertTrue(page.killed());
            assertTrue(page.unmanaged());
            assertEquals(KillMode.PAUSED, page.killMode(), "KILL wins over UNMANAGED");
            assertEquals(Layout.Control.KILL | Layout.Control.UNMANAGED, page.control());
            assertEquals(50_000_000L, page.heartbeatStaleNs());
            assertEquals(BatchMode.KILLED, page.batchMode(), "KILL wins over a stale heartbeat");
            ControllerConfig c0 = page.readController(0);
            assertEquals(3, c0.policy());
            assertEquals(2, c0.seq());
            assertEquals(List.of(1), c0.partners());
            assertEquals(2_000_000L, c0.budgetNs());
            ControllerConfig c1 = page.readController(1);
            assertEquals(Layout.Role.BATCH, c1.role());
            assertEquals(Layout.Nap.HYBRID, c1.nap());
            assertEquals(1500, c1.refIpcMilli());
            assertEquals(50_000, c1.hybridSpinNs());
            assertEquals(List.of(0), c1.partners());
            LcLineSnapshot lc = page.readLc(0);
            assertTrue(State.busy(lc.state()));
            assertEquals(5, State.seq(lc.state()));
            assertEquals(3, State.queueLen(lc.state()));
            assertEquals(0xDEAD_BEEF_0000_0042L, lc.requestId());
            assertEquals(new LcLineSnapshot(12884901899L, 0xDEAD_BEEF_0000_0042L, 5_399_000_000L, 123_456_789L, 4,
                    4243), lc);
            assertEquals(new BatchLineSnapshot(1, 1, 1, 17, 16, 1_000_000, 250_000, 5_399_000_100L, 40),
                    page.readBatch(1));
            assertEquals(new BatchLineSnapshot(0, 0, 0, 0, 0, 0, 0, 0, 0), page.readBatch(0));
            assertEquals(1, page.laneOfCpu(1));
            assertEquals(-1, page.laneOfCpu(7));

            for (Map<String, Object> f : TestSupport.goldenFields()) {
                String name = (String) f.get("name");
                int off = ((Number) f.get("offset")).intValue();
                int size = ((Number) f.get("size")).intValue();
                long want = parseU64(f.get("value"));
                boolean isPage = f.get("file").equals("page");
                MemorySegment seg = isPage ? page.pageSegment() : page.batchSegment();
                long got = size == 8 ? (long) Mem.U64.getAcquire(seg, (long) off)
                        : Integer.toUnsignedLong((int) Mem.U32.getAcquire(seg, (long) off));
                if (!name.equals("header.batch_shmid")) {
                    assertEquals(want, got, name + " through the mapped segment");
                }
                assertEquals(want, TestSupport.readLe(isPage ? pageBytes : batchBytes, off, size), name + " in the file");
                boolean[] cov = covered[isPage ? 0 : 1];
                for (int i = off; i < off + size; i++) {
                    cov[i] = true;
                }
            }
            // everything not named is reserved and zero
            for (int f = 0; f < 2; f++) {
                for (int i = 0; i < golden[f].length; i++) {
                    assertTrue(covered[f][i] || golden[f][i] == 0, (f == 0 ? "page" : "batch") + " reserved byte " + i);
                }
            }
        }
    }

    /** The golden page's content, as crates/shm/tests/page.rs builds it. */
    static Page writeGolden(Path dir) throws ElfenException {
        PageSpec spec = TestSupport.twoLanes(1, 0)
                .withIdentity(new Identity(0x0123_4567_89AB_CDEFL, 4242, 1_790_000_000L));
        spec = spec.withLane(0, spec.lanes().get(0).withPolicy(2).withBudgetNs(2_000_000));
        spec = spec.withLane(1, spec.lanes().get(1).withPolicy(2).withBudgetNs(1_000_000).withNap(Layout.Nap.HYBRID)
                .withRefIpcMilli(1500));
        Page page = Page.create(dir.resolve("golden"), spec);
        // one seqlocked rewrite of lane 0 (config_seq 0 -> 2)
        page.writeController(0, spec.lanes().get(0).withPolicy(3));
        // the kill switch in mode "paused" over "unmanaged", the fail-safe on at 50 ms
        page.setControl(KillMode.UNMANAGED);
        page.setKill(true);
        page.setHeartbeatStale(50_000_000L);
        MemorySegment p = page.pageSegment();
        Mem.set64(p, Layout.Header.HEARTBEAT, 5_400_000_000L);
        long lc = Layout.lcLine(0);
        Mem.release64(p, lc + Layout.LcLine.STATE, State.pack(true, 5, 3));
        Mem.set64(p, lc + Layout.LcLine.REQUEST_ID, 0xDEAD_BEEF_0000_0042L);
        Mem.set64(p, lc + Layout.LcLine.BUSY_SINCE, 5_399_000_000L);
        Mem.set64(p, lc + Layout.LcLine.BUSY_TICKS, 123_456_789L);
        Mem.set64(p, lc + Layout.LcLine.REQUESTS, 4);
        Mem.set32(p, lc + Layout.LcLine.LC_TID, 4243);
        MemorySegment b = page.batchSegment();
        long bl = Layout.batchLine(1);
        Mem.set32(b, bl + Layout.BatchLine.ATTACHED, 1);
        Mem.set32(b, bl + Layout.BatchLine.NAPPING, 1);
        Mem.set32(b, bl + Layout.BatchLine.SLEEPERS, 1);
        Mem.set64(b, bl + Layout.BatchLine.NAPS, 17);
        Mem.set64(b, bl + Layout.BatchLine.WAKES, 16);
        Mem.set64(b, bl + Layout.BatchLine.RUN_TICKS, 1_000_000);
        Mem.set64(b, bl + Layout.BatchLine.CORUN_TICKS, 250_000);
        Mem.set64(b, bl + Layout.BatchLine.LAST_CHANGE, 5_399_000_100L);
        Mem.set64(b, bl + Layout.BatchLine.SLOW_CHECKS, 40);
        return page;
    }

    @Test
    void aPageWrittenFromJavaEqualsTheGoldenBytes() throws Exception {
        Path td = TestSupport.signalTestdata();
        try (Page page = writeGolden(dir)) {
            byte[][] got = TestSupport.goldenBytes(page);
            byte[] gotPage = got[0];
            byte[] gotBatch = got[1];
            assertEquals(384, gotPage.length);
            assertArrayEquals(Files.readAllBytes(td.resolve("v2-2lanes.page.bin")), gotPage,
                    "page bytes differ from testdata/signal/v2-2lanes.page.bin");
            assertArrayEquals(Files.readAllBytes(td.resolve("v2-2lanes.batch.bin")), gotBatch,
                    "batch bytes differ from testdata/signal/v2-2lanes.batch.bin");
        }
        assertTrue(Files.notExists(dir.resolve("golden")), "the creator removes its page");
        try (var s = Files.list(dir)) {
            assertEquals(List.of(), s.toList(), "no temporary files left");
        }
    }

    @Test
    void javaControllerValuesMatchTheJsonByName() throws Exception {
        // the JSON's values, written field by field into zeroed buffers through
        // Layout's offsets, equal the .bin files (the C test's "write" check)
        Path td = TestSupport.signalTestdata();
        byte[] page = new byte[(int) Layout.pageSize(2)];
        byte[] batch = new byte[(int) Layout.batchSize(2)];
        Map<String, LayoutTest.Field> byName = new java.util.HashMap<>();
        for (LayoutTest.Field f : LayoutTest.table()) {
            byName.put(f.name(), f);
        }
        for (Map<String, Object> f : TestSupport.goldenFields()) {
            LayoutTest.Field m = byName.get((String) f.get("name"));
            byte[] b = m.file().equals("page") ? page : batch;
            long v = parseU64(f.get("value"));
            for (int i = 0; i < m.size(); i++) {
                b[(int) m.offset() + i] = (byte) (v >>> (8 * i));
            }
        }
        assertArrayEquals(Files.readAllBytes(td.resolve("v2-2lanes.page.bin")), page);
        assertArrayEquals(Files.readAllBytes(td.resolve("v2-2lanes.batch.bin")), batch);
    }
}
