package dev.elfen;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Every offset of {@link Layout} against testdata/signal/v2-2lanes.json, and the state word. */
class LayoutTest {
    /** (file, name, offset, size) of every named field of a 2-lane page, from {@link Layout}. */
    record Field(String file, String name, long offset, int size) {}

    static List<Field> table() {
        List<Field> t = new ArrayList<>();
        Object[][] header = {
            {"magic", Layout.Header.MAGIC, 8}, {"abi_version", Layout.Header.ABI_VERSION, 4},
            {"line_size", Layout.Header.LINE_SIZE, 4}, {"total_size", Layout.Header.TOTAL_SIZE, 8},
            {"lane_count", Layout.Header.LANE_COUNT, 4}, {"clock", Layout.Header.CLOCK, 4},
            {"ticks_per_sec", Layout.Header.TICKS_PER_SEC, 8}, {"instance", Layout.Header.INSTANCE, 8},
            {"creator_pid", Layout.Header.CREATOR_PID, 4}, {"batch_shmid", Layout.Header.BATCH_SHMID, 4},
            {"created_unix_s", Layout.Header.CREATED_UNIX_S, 8}, {"heartbeat", Layout.Header.HEARTBEAT, 8},
            {"control", Layout.Header.CONTROL, 8}, {"heartbeat_stale_ns", Layout.Header.HEARTBEAT_STALE_NS, 8},
        };
        add(t, "page", 0, "header", header);
        Object[][] bheader = {
            {"magic", Layout.BatchHeader.MAGIC, 8}, {"abi_version", Layout.BatchHeader.ABI_VERSION, 4},
            {"line_size", Layout.BatchHeader.LINE_SIZE, 4}, {"total_size", Layout.BatchHeader.TOTAL_SIZE, 8},
            {"lane_count", Layout.BatchHeader.LANE_COUNT, 4}, {"instance", Layout.BatchHeader.INSTANCE, 8},
        };
        add(t, "batch", 0, "batch_header", bheader);
        for (int lane = 0; lane < 2; lane++) {
            Object[][] lc = {
                {"state", Layout.LcLine.STATE, 8}, {"request_id", Layout.LcLine.REQUEST_ID, 8},
                {"busy_since", Layout.LcLine.BUSY_SINCE, 8}, {"busy_ticks", Layout.LcLine.BUSY_TICKS, 8},
                {"requests", Layout.LcLine.REQUESTS, 8}, {"lc_tid", Layout.LcLine.LC_TID, 4},
            };
            add(t, "page", Layout.lcLine(lane), "lane" + lane + ".lc", lc);
            long c = Layout.controllerLine(lane);
            Object[][] ctl = {
                {"role", Layout.ControllerLine.ROLE, 4}, {"cpu", Layout.ControllerLine.CPU, 4},
                {"policy", Layout.ControllerLine.POLICY, 4}, {"nap", Layout.ControllerLine.NAP, 4},
                {"budget_ns", Layout.ControllerLine.BUDGET_NS, 8},
                {"ref_ipc_milli", Layout.ControllerLine.REF_IPC_MILLI, 4},
                {"partner_count", Layout.ControllerLine.PARTNER_COUNT, 4},
            };
            add(t, "page", c, "lane" + lane + ".controller", ctl);
            for (int i = 0; i < Layout.MAX_PARTNERS; i++) {
                t.add(new Field("page", "lane" + lane + ".controller.partners[" + i + "]",
                        c + Layout.ControllerLine.PARTNERS + 4L * i, 4));
            }
            Object[][] ctl2 = {
                {"hybrid_spin_ns", Layout.ControllerLine.HYBRID_SPIN_NS, 4},
                {"config_seq", Layout.ControllerLine.CONFIG_SEQ, 4},
            };
            add(t, "page", c, "lane" + lane + ".controller", ctl2);
            Object[][] b = {
                {"attached", Layout.BatchLine.ATTACHED, 4}, {"sleepers", Layout.BatchLine.SLEEPERS, 4},
                {"napping", Layout.BatchLine.NAPPING, 4}, {"naps", Layout.BatchLine.NAPS, 8},
                {"wakes", Layout.BatchLine.WAKES, 8}, {"run_ticks", Layout.BatchLine.RUN_TICKS, 8},
                {"corun_ticks", Layout.BatchLine.CORUN_TICKS, 8}, {"last_change", Layout.BatchLine.LAST_CHANGE, 8},
                {"slow_checks", Layout.BatchLine.SLOW_CHECKS, 8},
            };
            add(t, "batch", Layout.batchLine(lane), "lane" + lane + ".batch", b);
        }
        return t;
    }

    private static void add(List<Field> t, String file, long base, String prefix, Object[][] rows) {
        for (Object[] r : rows) {
            t.add(new Field(file, prefix + "." + r[0], base + (int) r[1], (int) r[2]));
        }
    }

    @Test
    void everyOffsetMatchesTheGoldenJson() throws IOException {
        List<Map<String, Object>> json = TestSupport.goldenFields();
        List<Field> mine = table();
        assertEquals(json.size(), mine.size(), "the JSON and Layout name the same number of fields");
        for (int i = 0; i < mine.size(); i++) {
            Map<String, Object> f = json.get(i);
            Field m = mine.get(i);
            assertEquals(f.get("name"), m.name(), "field " + i);
            assertEquals(f.get("file"), m.file(), m.name());
            assertEquals(((Number) f.get("offset")).longValue(), m.offset(), m.name() + " offset");
            assertEquals(((Number) f.get("size")).intValue(), m.size(), m.name() + " size");
        }
    }

    @Test
    void sizesAndConstantsMatchTheGoldenJson() throws IOException {
        Map<String, Object> json = TestSupport.goldenJson();
        assertEquals(((Number) json.get("abi_version")).intValue(), Layout.ABI_VERSION);
        assertEquals(((Number) json.get("page_size")).longValue(), Layout.pageSize(2));
        assertEquals(((Number) json.get("batch_size")).longValue(), Layout.batchSize(2));
        assertEquals("ELFENSIG", Page.magicText(Layout.MAGIC));
        assertEquals("ELFENBAT", Page.magicText(Layout.BATCH_MAGIC));
        assertEquals(384, Layout.pageSize(2));
        assertEquals(192, Layout.batchSize(2));
        assertEquals(Layout.HEADER_SIZE, 2 * Layout.LINE_SIZE);
        assertEquals(Layout.LANE_STRIDE, 2 * Layout.LINE_SIZE);
        // every line is one 64-byte line: the last field ends inside it
        assertEquals(64, Layout.ControllerLine.CONFIG_SEQ + 4);
        assertEquals(64, Layout.BatchLine.SLOW_CHECKS + 8);
        // header line 1: heartbeat, control, the fail-safe's bound at 80, then reserved
        assertEquals(80, Layout.Header.HEARTBEAT_STALE_NS);
        assertEquals(Layout.LINE_SIZE, Layout.Header.HEARTBEAT);
        assertEquals(1, Layout.Control.KILL);
        assertEquals(2, Layout.Control.UNMANAGED);
        assertEquals(3, Layout.Control.KNOWN);
    }

    @Test
    void stateWordRoundTrips() {
        int[][] cases = {{0, 0, 0}, {1, 1, 0}, {1, 0x7FFF_FFFF, State.MAX_QUEUE_LEN}, {0, 12345, 7}};
        for (int[] c : cases) {
            long s = State.pack(c[0] == 1, c[1], c[2]);
            assertEquals(c[0] == 1, State.busy(s));
            assertEquals(c[1], State.seq(s));
            assertEquals(c[2], State.queueLen(s));
        }
        // the queue length saturates below NEVER's
        assertEquals(State.MAX_QUEUE_LEN, State.queueLen(State.pack(true, 0x7FFF_FFFF, -1)));
        assertNotEquals(State.NEVER, State.pack(true, 0x7FFF_FFFF, -1));
        // the sequence wraps within its 31 bits and never touches the busy bit
        long s = State.pack(false, 0x8000_0001, 0);
        assertEquals(1, State.seq(s));
        assertFalse(State.busy(s));
        // begin and end both change the futex word; the queue length does not
        long idle = State.pack(false, 4, 9);
        long busy = State.pack(true, 5, 9);
        assertNotEquals(State.futexWord(idle), State.futexWord(busy));
        assertEquals(State.futexWord(busy), State.futexWord(State.pack(true, 5, 1)));
        // the golden state: busy, seq 5, queue 3
        assertEquals(12884901899L, State.pack(true, 5, 3));
        assertTrue(State.busy(12884901899L));
    }
}
