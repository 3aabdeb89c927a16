package dev.elfen.lucene;

import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class SignalTest {
  @Test
  void noneIsANoOp() {
    assertSame(LcSignal.NONE, LcSignal.open("none", null, null));
    assertSame(LcSignal.NONE, LcSignal.open(null, null, null));
    LcSignal.NONE.begin(1, 0);
    LcSignal.NONE.end(0);
  }

  @Test
  void apiWithoutPageOrLaneIsRejected() {
    assertThrows(IllegalArgumentException.class, () -> LcSignal.open("api", null, "0"));
  }

  @Test
  void unknownModeIsRejected() {
    assertThrows(IllegalArgumentException.class, () -> LcSignal.open("bpf", null, null));
  }

  // TODO(java binding): once bindings/java/signal is a dependency, this becomes a test that
  // api attaches a lane of a real page and publishes begin/end.
  @Test
  void apiIsAnErrorWhileTheBindingIsUnavailableNeverASilentNoOp() {
    IllegalStateException e = assertThrows(IllegalStateException.class,
        () -> LcSignal.open("api", "/dev/shm/elfen-test-page", "0"));
    assertTrue(e.getMessage().contains("binding"), e.getMessage());
  }

  @Test
  void batchCheckWithoutPageIsNone() {
    assertSame(BatchCheck.NONE, BatchCheck.open(null, null));
    BatchCheck.NONE.check();
    assertThrows(IllegalArgumentException.class, () -> BatchCheck.open("/dev/shm/x", null));
  }

  @Test
  void batchCheckWithPageIsAnErrorWhileTheBindingIsUnavailable() {
    IllegalStateException e = assertThrows(IllegalStateException.class,
        () -> BatchCheck.open("/dev/shm/elfen-test-page", "1"));
    assertTrue(e.getMessage().contains("binding"), e.getMessage());
  }
}
