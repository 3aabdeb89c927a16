package dev.elfen.lucene;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

class DemandTest {
  @Test
  void percentilesAndBuckets() {
    long[] ns = {100_000, 200_000, 300_000, 1_500_000};
    assertEquals(200.0, Demand.pct(ns, 0.5));
    assertEquals(1500.0, Demand.pct(ns, 0.99));
    assertArrayEquals(new double[] {0.75, 0.25}, Demand.shares(ns, 1_000_000), 1e-12);
    assertEquals(2.5, Demand.median(new double[] {4, 1, 2, 3}));
  }

  @Test
  void jsonEscapes() {
    assertEquals("{\n  \"a\\\"b\": [1, 2.5, \"x\\ny\"]\n}\n",
        Json.write(java.util.Map.of("a\"b", java.util.List.of(1, 2.5, "x\ny"))));
  }
}
