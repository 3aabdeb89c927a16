package dev.elfen.lucene;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * Finds the query file {@value #TASKS} of luceneutil. It ships with the repository, in
 * {@code data/luceneutil} (Apache-2.0, attribution in its README); {@code ELFEN_DATA_DIR} names
 * another directory explicitly.
 */
public final class DataDir {
  /** The file name of the query file. */
  public static final String TASKS = "wikimedium.10M.nostopwords.tasks";

  private DataDir() {}

  /** Where to look when {@code ELFEN_DATA_DIR} is not set, most specific first. */
  public static List<Path> candidates() {
    List<Path> out = new ArrayList<>();
    Path repo = repoRoot();
    if (repo != null) {
      out.add(repo.resolve("data").resolve("luceneutil"));
    }
    out.add(Path.of("data", "luceneutil").toAbsolutePath());
    return out;
  }

  /**
   * The query file in {@code dataDir}, or (when null) in the first candidate that has it.
   *
   * @throws IllegalStateException naming every place looked at when there is none
   */
  public static Path tasksFile(String dataDir) {
    if (dataDir != null) {
      Path p = Path.of(dataDir).resolve(TASKS);
      if (!Files.isReadable(p)) {
        throw new IllegalStateException("ELFEN_DATA_DIR / --data-dir is " + dataDir + " but " + p
            + " is missing or unreadable");
      }
      return p;
    }
    List<Path> tried = candidates();
    for (Path d : tried) {
      Path p = d.resolve(TASKS);
      if (Files.isReadable(p)) {
        return p;
      }
    }
    StringBuilder sb = new StringBuilder("the query file " + TASKS + " was not found; set ELFEN_DATA_DIR"
        + " (or --data-dir / --tasks). Looked in:");
    for (Path d : tried) {
      sb.append("\n  ").append(d);
    }
    throw new IllegalStateException(sb.toString());
  }

  /**
   * The repository's root: {@code ELFEN_REPO} if set, else the nearest directory above this
   * program's jar (or the working directory) that holds {@code Cargo.toml} and {@code bindings}.
   */
  static Path repoRoot() {
    String env = System.getenv("ELFEN_REPO");
    if (env != null && !env.isEmpty()) {
      return Path.of(env).toAbsolutePath();
    }
    List<Path> starts = new ArrayList<>();
    try {
      var src = DataDir.class.getProtectionDomain().getCodeSource();
      if (src != null) {
        starts.add(Path.of(src.getLocation().toURI()).toAbsolutePath());
      }
    } catch (Exception ignored) {
      // no code source: fall back to the working directory
    }
    starts.add(Path.of("").toAbsolutePath());
    for (Path s : starts) {
      for (Path p = s; p != null; p = p.getParent()) {
        if (Files.isRegularFile(p.resolve("Cargo.toml")) && Files.isDirectory(p.resolve("bindings"))) {
          return p;
        }
      }
    }
    return null;
  }
}
