package dev.elfen.lucene;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class LuceneIndexTest {
  @Test
  void buildsOpensAndSearches(@TempDir Path dir) throws IOException {
    TestCorpus tc = TestCorpus.build(dir);
    assertTrue(tc.buildLog.contains("40 docs"), tc.buildLog);
    try (LuceneIndex idx = LuceneIndex.open(tc.index, tc.corpus)) {
      assertEquals(40, idx.reader().numDocs());
      assertEquals(1, idx.reader().leaves().size());
      Search s = new Search(idx.reader(), true);
      assertEquals(10, s.run("search"));
      assertEquals(40, s.lastTotalHits());
      assertEquals(5, s.run("lane")); // i % 8 == 0 for i < 40
      assertEquals(0, s.run("absent"));
    }
    assertTrue(Files.notExists(dir.resolve("index.building")));
  }

  private static String openError(Path index, Path corpus) {
    return assertThrows(LuceneIndex.IndexException.class, () -> LuceneIndex.open(index, corpus)).getMessage();
  }

  @Test
  void missingIndexIsAClearError(@TempDir Path dir) {
    String m = openError(dir.resolve("nope"), null);
    assertTrue(m.contains("no index at"), m);
  }

  @Test
  void halfBuiltIndexIsDetected(@TempDir Path dir) throws IOException {
    TestCorpus tc = TestCorpus.build(dir);
    Files.delete(tc.index.resolve(LuceneIndex.MARKER));
    String m = openError(tc.index, tc.corpus);
    assertTrue(m.contains("half-built"), m);
  }

  @Test
  void truncatedFileIsCorrupt(@TempDir Path dir) throws IOException {
    TestCorpus tc = TestCorpus.build(dir);
    Path victim = largestFile(tc.index);
    try (FileChannel ch = FileChannel.open(victim, StandardOpenOption.WRITE)) {
      ch.truncate(ch.size() / 2);
    }
    String m = openError(tc.index, tc.corpus);
    assertTrue(m.contains("corrupt") && m.contains(victim.getFileName().toString()), m);
  }

  @Test
  void flippedByteFailsTheChecksum(@TempDir Path dir) throws IOException {
    TestCorpus tc = TestCorpus.build(dir);
    Path victim = largestFile(tc.index);
    byte[] b = Files.readAllBytes(victim);
    b[b.length / 2] ^= 0x5a;
    Files.write(victim, b);
    String m = openError(tc.index, tc.corpus);
    assertTrue(m.contains("corrupt"), m);
  }

  @Test
  void staleIndexIsDetected(@TempDir Path dir) throws IOException {
    TestCorpus tc = TestCorpus.build(dir);
    List<Corpus.Doc> docs = new java.util.ArrayList<>(TestCorpus.docs());
    docs.add(new Corpus.Doc("t/new", "wiki", "New", "a new document"));
    Corpus.write(tc.corpus, docs);
    TestCorpus.writeManifest(tc.corpus, docs.size());
    String m = openError(tc.index, tc.corpus);
    assertTrue(m.contains("stale"), m);
  }

  @Test
  void buildWithoutACorpusFailsAndLeavesNothing(@TempDir Path dir) throws IOException {
    IOException e = assertThrows(IOException.class, () -> LuceneIndex.build(dir.resolve("docs.tsv"),
        dir.resolve("index"), new java.io.PrintStream(java.io.OutputStream.nullOutputStream())));
    assertTrue(e.getMessage().contains("scripts/corpus.sh"), e.getMessage());
    try (var s = Files.list(dir)) {
      assertEquals(0, s.count());
    }
  }

  @Test
  void badCorpusLineFailsTheBuildAndRemovesTheHalfBuiltIndex(@TempDir Path dir) throws IOException {
    Path corpus = dir.resolve("docs.tsv");
    Files.writeString(corpus, Corpus.HEADER + "\na\tb\tc\td\nbroken line\n");
    IOException e = assertThrows(IOException.class, () -> LuceneIndex.build(corpus, dir.resolve("index"),
        new java.io.PrintStream(java.io.OutputStream.nullOutputStream())));
    assertTrue(e.getMessage().contains("docs.tsv:3"), e.getMessage());
    assertTrue(Files.notExists(dir.resolve("index")) && Files.notExists(dir.resolve("index.building")));
  }

  @Test
  void interruptedBuildIsReplacedByTheNextBuild(@TempDir Path dir) throws IOException {
    Path corpus = dir.resolve("docs.tsv");
    Corpus.write(corpus, TestCorpus.docs());
    Path building = dir.resolve("index.building");
    Files.createDirectories(building);
    Files.writeString(building.resolve("_0.cfs"), "garbage");
    LuceneIndex.build(corpus, dir.resolve("index"), new java.io.PrintStream(java.io.OutputStream.nullOutputStream()));
    try (LuceneIndex idx = LuceneIndex.open(dir.resolve("index"), corpus)) {
      assertEquals(40, idx.reader().numDocs());
    }
  }

  @Test
  void copiesMultiplyPostingsAndAreChecked(@TempDir Path dir) throws IOException {
    Path corpus = dir.resolve("docs.tsv");
    Corpus.write(corpus, TestCorpus.docs());
    Path index = dir.resolve("index-x3");
    LuceneIndex.build(corpus, index, 3, new java.io.PrintStream(java.io.OutputStream.nullOutputStream()));
    try (LuceneIndex idx = LuceneIndex.open(index, corpus, 3)) {
      assertEquals(120, idx.reader().numDocs());
      Search s = new Search(idx.reader(), true);
      s.run("lane");
      assertEquals(15, s.lastTotalHits());
    }
    String m = openError(index, corpus);
    assertTrue(m.contains("3 copies"), m);
  }

  private static Path largestFile(Path dir) throws IOException {
    Path best = null;
    for (Path f : LuceneIndex.listFiles(dir)) {
      if (best == null || Files.size(f) > Files.size(best)) {
        best = f;
      }
    }
    return best;
  }
}
