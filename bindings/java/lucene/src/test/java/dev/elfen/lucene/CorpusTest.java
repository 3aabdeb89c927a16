package dev.elfen.lucene;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.StringReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class CorpusTest {
  @Test
  void roundTripsEscapedFields(@TempDir Path dir) throws IOException {
    List<Corpus.Doc> docs = List.of(
        new Corpus.Doc("a/1", "gcide", "Tab\there", "line one\nline two\\n not a newline\r"),
        new Corpus.Doc("b/2", "wiki", "", "x"));
    Path f = dir.resolve("docs.tsv");
    Corpus.write(f, docs);
    assertEquals(docs, Corpus.load(f));
  }

  @Test
  void rejectsAFileWithoutTheHeader() {
    IOException e = assertThrows(IOException.class,
        () -> Corpus.forEach(new StringReader("a\tb\tc\td\n"), "x.tsv", d -> {}));
    assertTrue(e.getMessage().contains("not an elfen corpus"), e.getMessage());
  }

  @Test
  void rejectsALineWithTheWrongFieldCount() {
    IOException e = assertThrows(IOException.class,
        () -> Corpus.forEach(new StringReader(Corpus.HEADER + "\na\tb\tc\n"), "x.tsv", d -> {}));
    assertTrue(e.getMessage().contains("x.tsv:2"), e.getMessage());
  }

  @Test
  void readsTheManifest(@TempDir Path dir) throws IOException {
    Path f = dir.resolve("docs.tsv");
    assertEquals(null, Corpus.manifest(f));
    Files.writeString(dir.resolve("corpus.json"), "{\"format\": \"x\", \"docs\": 12, \"per_source\": {\"a\": 12},"
        + " \"sha256\": \"" + "ab".repeat(32) + "\"}");
    assertEquals(new Corpus.Manifest(12, "ab".repeat(32)), Corpus.manifest(f));
  }
}
