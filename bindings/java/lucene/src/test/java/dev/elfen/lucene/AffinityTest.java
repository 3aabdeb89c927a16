package dev.elfen.lucene;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

class AffinityTest {
  @Test
  void parsesCpuLists() {
    assertEquals(List.of(0), Affinity.parseCpus("0"));
    assertEquals(List.of(1, 3), Affinity.parseCpus("1,3"));
    assertEquals(List.of(0, 1, 2, 5), Affinity.parseCpus(" 0-2 , 5 "));
    assertThrows(IllegalArgumentException.class, () -> Affinity.parseCpus("a"));
    assertThrows(IllegalArgumentException.class, () -> Affinity.parseCpus(""));
    assertThrows(IllegalArgumentException.class, () -> Affinity.parseCpus("5000"));
  }

  @Test
  void pinsTheCallingThreadOnly() throws InterruptedException {
    String before = Affinity.currentCpus();
    int first = Affinity.parseCpus(before).get(0);
    AtomicReference<String> seen = new AtomicReference<>();
    Thread t = new Thread(() -> {
      Affinity.pinCurrentThread(List.of(first));
      seen.set(Affinity.currentCpus());
    });
    t.start();
    t.join();
    assertEquals(Integer.toString(first), seen.get());
    assertEquals(before, Affinity.currentCpus());
    assertTrue(Affinity.tid() > 0);
  }

  @Test
  void setsFifoOnTheCallingThreadWhenPermitted() throws InterruptedException {
    AtomicReference<String> refused = new AtomicReference<>();
    AtomicReference<Integer> policy = new AtomicReference<>();
    Thread t = new Thread(() -> {
      refused.set(Affinity.setFifo(1));
      policy.set(Affinity.currentPolicy());
    });
    t.start();
    t.join();
    assertEquals(0, Affinity.currentPolicy(), "only the calling thread changes");
    assertThrows(IllegalArgumentException.class, () -> Affinity.setFifo(0));
    if (refused.get() != null) {
      assertEquals(0, policy.get());
    }
    Assumptions.assumeTrue(refused.get() == null, "needs root: SCHED_FIFO refused here (" + refused.get() + ")");
    assertEquals(1, policy.get());
  }

  @Test
  void setsNiceOnTheCallingThreadWhenPermitted() throws InterruptedException {
    AtomicReference<String> refused = new AtomicReference<>();
    AtomicReference<Integer> nice = new AtomicReference<>();
    AtomicReference<Integer> policy = new AtomicReference<>();
    int before = Affinity.currentNice();
    Thread t = new Thread(() -> {
      refused.set(Affinity.setNice(-20));
      nice.set(Affinity.currentNice());
      policy.set(Affinity.currentPolicy());
    });
    t.start();
    t.join();
    assertEquals(before, Affinity.currentNice(), "only the calling thread changes");
    assertThrows(IllegalArgumentException.class, () -> Affinity.setNice(-21));
    assertThrows(IllegalArgumentException.class, () -> Affinity.setNice(20));
    assertEquals(0, policy.get(), "still SCHED_OTHER");
    if (refused.get() != null) {
      assertEquals(before, nice.get());
    }
    Assumptions.assumeTrue(refused.get() == null, "needs root: nice -20 refused here (" + refused.get() + ")");
    assertEquals(-20, nice.get());
  }
}
