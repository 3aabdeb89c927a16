package dev.elfen.lucene;

import java.io.IOException;
import java.io.PrintStream;
import java.io.Reader;
import java.io.UncheckedIOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Properties;
import java.util.stream.Stream;
import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.analysis.CharArraySet;
import org.apache.lucene.analysis.standard.StandardAnalyzer;
import org.apache.lucene.document.Document;
import org.apache.lucene.document.Field;
import org.apache.lucene.document.StringField;
import org.apache.lucene.document.TextField;
import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.IndexWriter;
import org.apache.lucene.index.IndexWriterConfig;
import org.apache.lucene.index.LeafReaderContext;
import org.apache.lucene.store.Directory;
import org.apache.lucene.store.FSDirectory;
import org.apache.lucene.util.Version;

/**
 * The search index: built once from the corpus, reused when present.
 *
 * <p>A build writes into {@code <index>.building}, merges to one segment (a layout that does
 * not depend on thread timing, so query costs repeat across builds), writes the marker {@value
 * #MARKER} (corpus checksum and document count, Lucene version, every file's size) and only
 * then renames the directory to its final name: an index directory without a valid marker is
 * half-built or foreign. {@link #open} checks the marker, the corpus it was built from, every
 * file's size and every file's checksum ({@code checkIntegrity}), so a stale, half-built or
 * corrupt index is an error before anything is served.
 */
public final class LuceneIndex implements AutoCloseable {
  /** The field searched by the term queries. */
  public static final String BODY = "body";
  /** The marker file written last by a complete build. */
  public static final String MARKER = "elfen-index.properties";
  /** The marker's format. */
  public static final String FORMAT = "elfen-lucene-index-1";

  private final Directory dir;
  private final DirectoryReader reader;
  private final Properties marker;

  private LuceneIndex(Directory dir, DirectoryReader reader, Properties marker) {
    this.dir = dir;
    this.reader = reader;
    this.marker = marker;
  }

  /** An index that is missing, half-built, stale or corrupt. */
  public static final class IndexException extends IOException {
    private static final long serialVersionUID = 1L;

    IndexException(String message) {
      super(message);
    }

    IndexException(String message, Throwable cause) {
      super(message, cause);
    }
  }

  /** The analyzer of the body and title fields: standard tokenizer, lower case, no stop words. */
  public static Analyzer analyzer() {
    return new StandardAnalyzer(CharArraySet.EMPTY_SET);
  }

  /** The Lucene document of a corpus document. */
  public static Document document(Corpus.Doc d) {
    Document doc = new Document();
    doc.add(new StringField("id", d.id(), Field.Store.YES));
    doc.add(new StringField("source", d.source(), Field.Store.YES));
    doc.add(new TextField("title", d.title(), Field.Store.YES));
    doc.add(new TextField(BODY, d.body(), Field.Store.NO));
    return doc;
  }

  /** What a build did. */
  public record BuildStats(long docs, long buildMs, long bytes) {}

  /**
   * Builds the index of {@code corpusFile} at {@code indexDir}, replacing whatever is there.
   * Progress lines go to {@code log}.
   */
  public static BuildStats build(Path corpusFile, Path indexDir, PrintStream log) throws IOException {
    return build(corpusFile, indexDir, 1, log);
  }

  /**
   * Builds the index with every corpus document added {@code copies} times (ids suffixed
   * {@code #c}): postings grow {@code copies}-fold, and so does the cost of a query, to bring the
   * demand towards that of the paper's 10M-document index. The marker records {@code copies}.
   */
  public static BuildStats build(Path corpusFile, Path indexDir, int copies, PrintStream log) throws IOException {
    if (copies < 1) {
      throw new IllegalArgumentException("copies must be >= 1, not " + copies);
    }
    if (!Files.isReadable(corpusFile)) {
      throw new IOException("corpus " + corpusFile + " is missing: run scripts/corpus.sh (or pass --corpus)");
    }
    Corpus.Manifest cm = Corpus.manifest(corpusFile);
    Path tmp = indexDir.toAbsolutePath().resolveSibling(indexDir.getFileName() + ".building");
    try {
      return buildInto(corpusFile, cm, tmp, indexDir, copies, log);
    } catch (IOException | RuntimeException e) {
      try {
        deleteTree(tmp);
      } catch (IOException suppressed) {
        e.addSuppressed(suppressed);
      }
      if (e instanceof UncheckedIOException u) {
        throw u.getCause();
      }
      throw e;
    }
  }

  private static BuildStats buildInto(Path corpusFile, Corpus.Manifest cm, Path tmp, Path indexDir, int copies,
      PrintStream log) throws IOException {
    if (Files.exists(tmp)) {
      log.println("index: removing an interrupted build at " + tmp);
      deleteTree(tmp);
    }
    Files.createDirectories(tmp);
    long t0 = System.nanoTime();
    long expected = cm != null ? cm.docs() * copies : -1;
    long docs;
    try (Directory d = FSDirectory.open(tmp);
        IndexWriter w = new IndexWriter(d, new IndexWriterConfig(analyzer())
            .setOpenMode(IndexWriterConfig.OpenMode.CREATE).setRAMBufferSizeMB(64))) {
      long[] n = {0};
      long[] lastReport = {t0};
      Corpus.forEach(corpusFile, doc -> {
        try {
          if (copies == 1) {
            w.addDocument(document(doc));
          } else {
            for (int c = 0; c < copies; c++) {
              w.addDocument(document(new Corpus.Doc(doc.id() + "#" + c, doc.source(), doc.title(), doc.body())));
            }
          }
        } catch (IOException e) {
          throw new UncheckedIOException(e);
        }
        n[0] += copies;
        long now = System.nanoTime();
        if (now - lastReport[0] >= 2_000_000_000L) {
          lastReport[0] = now;
          double s = (now - t0) / 1e9;
          log.printf("index: %d%s docs, %.0f docs/s, %.1f s%n", n[0],
              expected > 0 ? String.format("/%d (%.0f %%)", expected, 100.0 * n[0] / expected) : "",
              n[0] / s, s);
        }
      });
      docs = n[0];
      log.printf("index: %d docs added in %.1f s; merging to one segment%n", docs, (System.nanoTime() - t0) / 1e9);
      w.forceMerge(1);
      w.commit();
    }
    long buildMs = (System.nanoTime() - t0) / 1_000_000;
    Properties p = new Properties();
    p.setProperty("format", FORMAT);
    p.setProperty("lucene", Version.LATEST.toString());
    p.setProperty("docs", Long.toString(docs));
    p.setProperty("copies", Integer.toString(copies));
    p.setProperty("corpus", corpusFile.toAbsolutePath().toString());
    p.setProperty("corpus_sha256", cm != null ? cm.sha256() : "unknown");
    p.setProperty("build_ms", Long.toString(buildMs));
    long bytes = 0;
    StringBuilder files = new StringBuilder();
    for (Path f : listFiles(tmp)) {
      long size = Files.size(f);
      bytes += size;
      files.append(files.isEmpty() ? "" : ",").append(f.getFileName()).append(':').append(size);
    }
    p.setProperty("files", files.toString());
    p.setProperty("bytes", Long.toString(bytes));
    try (Writer out = Files.newBufferedWriter(tmp.resolve(MARKER), StandardCharsets.UTF_8)) {
      p.store(out, "written last by a complete build; an index without it is half-built");
    }
    if (Files.exists(indexDir)) {
      log.println("index: replacing " + indexDir);
      deleteTree(indexDir);
    }
    Files.move(tmp, indexDir, StandardCopyOption.ATOMIC_MOVE);
    log.printf("index: %d docs, %.1f MB at %s, built in %.1f s%n", docs, bytes / 1e6, indexDir, buildMs / 1e3);
    return new BuildStats(docs, buildMs, bytes);
  }

  /**
   * Opens and verifies the index at {@code indexDir}.
   *
   * @param corpusFile the corpus it should have been built from, or null to skip that check
   * @throws IndexException when it is missing, half-built, stale or corrupt (the message says
   *     which and what to do)
   */
  public static LuceneIndex open(Path indexDir, Path corpusFile) throws IOException {
    return open(indexDir, corpusFile, 1);
  }

  /** {@link #open(Path, Path)} for an index built with {@code copies} copies of each document. */
  public static LuceneIndex open(Path indexDir, Path corpusFile, int copies) throws IOException {
    String rebuild = "rebuild it with `elfen-lucene index --rebuild`";
    if (!Files.isDirectory(indexDir)) {
      throw new IndexException("no index at " + indexDir + ": build it with `elfen-lucene index`");
    }
    Path markerFile = indexDir.resolve(MARKER);
    if (!Files.isReadable(markerFile)) {
      throw new IndexException("the index at " + indexDir + " has no " + MARKER
          + ": it is half-built or not an elfen index; " + rebuild);
    }
    Properties p = new Properties();
    try (Reader r = Files.newBufferedReader(markerFile, StandardCharsets.UTF_8)) {
      p.load(r);
    }
    if (!FORMAT.equals(p.getProperty("format"))) {
      throw new IndexException(markerFile + ": format is '" + p.getProperty("format") + "', expected "
          + FORMAT + "; " + rebuild);
    }
    String builtCopies = p.getProperty("copies", "1");
    if (!builtCopies.equals(Integer.toString(copies))) {
      throw new IndexException("the index at " + indexDir + " holds " + builtCopies + " copies of each document, "
          + copies + " were asked for; " + rebuild);
    }
    if (corpusFile != null) {
      Corpus.Manifest cm = Corpus.manifest(corpusFile);
      String built = p.getProperty("corpus_sha256", "unknown");
      if (cm != null && !cm.sha256().equals(built)) {
        throw new IndexException("the index at " + indexDir + " is stale: built from corpus sha256 "
            + built + ", the corpus " + corpusFile + " is now " + cm.sha256() + "; " + rebuild);
      }
    }
    for (String entry : p.getProperty("files", "").split(",")) {
      int colon = entry.lastIndexOf(':');
      if (colon <= 0) {
        throw new IndexException(markerFile + ": bad files entry '" + entry + "'; " + rebuild);
      }
      Path f = indexDir.resolve(entry.substring(0, colon));
      long want = Long.parseLong(entry.substring(colon + 1));
      long have;
      try {
        have = Files.size(f);
      } catch (NoSuchFileException e) {
        throw new IndexException("the index at " + indexDir + " is corrupt: " + f.getFileName()
            + " is missing; " + rebuild);
      }
      if (have != want) {
        throw new IndexException("the index at " + indexDir + " is corrupt: " + f.getFileName() + " has "
            + have + " bytes, the build wrote " + want + "; " + rebuild);
      }
    }
    Directory dir = FSDirectory.open(indexDir);
    DirectoryReader reader = null;
    try {
      reader = DirectoryReader.open(dir);
      for (LeafReaderContext leaf : reader.leaves()) {
        leaf.reader().checkIntegrity();
      }
      long docs = Long.parseLong(p.getProperty("docs", "-1"));
      if (reader.numDocs() != docs) {
        throw new IndexException("the index at " + indexDir + " is corrupt: " + reader.numDocs()
            + " documents, the build wrote " + docs + "; " + rebuild);
      }
      return new LuceneIndex(dir, reader, p);
    } catch (IOException | RuntimeException e) {
      if (reader != null) {
        reader.close();
      }
      dir.close();
      if (e instanceof IndexException ie) {
        throw ie;
      }
      throw new IndexException("the index at " + indexDir + " is corrupt (" + e + "); " + rebuild, e);
    }
  }

  /** The open reader. */
  public DirectoryReader reader() {
    return reader;
  }

  /** A marker property (e.g. {@code docs}, {@code bytes}, {@code build_ms}). */
  public String info(String key) {
    return marker.getProperty(key);
  }

  @Override
  public void close() throws IOException {
    reader.close();
    dir.close();
  }

  /** The regular files of a directory, sorted by name. */
  static List<Path> listFiles(Path dir) throws IOException {
    List<Path> out = new ArrayList<>();
    try (DirectoryStream<Path> s = Files.newDirectoryStream(dir)) {
      for (Path f : s) {
        if (Files.isRegularFile(f) && !f.getFileName().toString().equals(MARKER)) {
          out.add(f);
        }
      }
    }
    out.sort(Comparator.comparing(Path::toString));
    return out;
  }

  /** Deletes a directory tree. */
  static void deleteTree(Path root) throws IOException {
    if (!Files.exists(root)) {
      return;
    }
    try (Stream<Path> s = Files.walk(root)) {
      for (Path f : s.sorted(Comparator.reverseOrder()).toList()) {
        Files.delete(f);
      }
    }
  }
}
