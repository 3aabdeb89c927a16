package dev.elfen.lucene;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.StringReader;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;

class TasksTest {
  @Test
  void parsesTermLinesAndSkipsOtherKinds() throws IOException {
    Tasks t = Tasks.parse(new StringReader("""
        HighTerm: ref # freq=3793973
        MedTerm:   bowl  # freq=40000
        LowTerm: php
        OrHighHigh: stock +ref # freq=1 freq=2
        Fuzzy1: ~bla

        AndHighHigh: +a +b
        """));
    assertEquals(3, t.queries().size());
    assertEquals(new Tasks.Query(0, 1, "HighTerm", "ref", 3793973), t.queries().get(0));
    assertEquals(new Tasks.Query(1, 2, "MedTerm", "bowl", 40000), t.queries().get(1));
    assertEquals(new Tasks.Query(2, 3, "LowTerm", "php", -1), t.queries().get(2));
    assertEquals(0, t.badLines());
    assertEquals(3, t.otherLines());
    assertEquals("HighTerm=1 MedTerm=1 LowTerm=1 bad=0 other=3", t.summary());
  }

  @Test
  void countsBadTermLinesWithoutFailing() throws IOException {
    Tasks t = Tasks.parse(new StringReader("""
        HighTerm: # freq=12
        MedTerm: two words # freq=5
        LowTerm: ok # freq=notanumber
        LowTerm: fine # freq=7
        """));
    assertEquals(1, t.queries().size());
    assertEquals("fine", t.queries().get(0).term());
    assertEquals(0, t.queries().get(0).index());
    assertEquals(3, t.badLines());
    assertEquals(3, t.badExamples().size());
    assertTrue(t.badExamples().get(0).startsWith("line 1: no term"), t.badExamples().get(0));
    assertTrue(t.badExamples().get(1).contains("more than one word"));
    assertTrue(t.badExamples().get(2).contains("bad frequency"));
  }

  @Test
  void payloadIsTermOrBodyTerm() {
    assertEquals("ref", Tasks.termOfPayload("ref"));
    assertEquals("ref", Tasks.termOfPayload(" body:ref\n"));
    assertNull(Tasks.termOfPayload(""));
    assertNull(Tasks.termOfPayload("body:"));
    assertNull(Tasks.termOfPayload("two words"));
  }

  @Test
  void theRealTasksFileHasTheTermQueriesOfThePaper() throws IOException {
    // The file ships with the repository (data/luceneutil): missing is a failure, not a skip.
    Path file = DataDir.tasksFile(System.getenv("ELFEN_DATA_DIR"));
    Tasks t = Tasks.load(file);
    // luceneutil's wikimedium.10M.nostopwords.tasks: 237 HighTerm, 500 MedTerm, 500 LowTerm
    assertEquals("HighTerm=237 MedTerm=500 LowTerm=500", t.summary().replaceAll(" bad=.*", ""));
    assertEquals(0, t.badLines());
  }
}
