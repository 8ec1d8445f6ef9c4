"""The fingerprint as a readable table (the JSON document is the engine's dict as is)."""

from __future__ import annotations


def rows(doc: dict) -> list[list[object]]:
    """[finding, value] rows of a fingerprint document."""
    out: list[list[object]] = [["target arithmetic", "dtype " + doc["dtype"] + f", probed at S = "
                                f"{', '.join(str(s) for s in doc['lengths'])} (B=1, H={doc['heads']}, N=1, "
                                f"d={doc['head_dim']})"
                                + (f", through its {doc['entry']} entry point" if doc.get("entry") == "decode" else "")
                                + (f"; ran under {doc['numerics']}" if doc.get("numerics") else "")]]
    if doc.get("policy") is None:
        out.append(["verdict", doc.get("unexplained")])
        closest = doc.get("closest_structure")
        if closest:
            out.append(["closest structure (not a match)", "; ".join(
                f"S={S}: Bc={c['kv_block']}, span={c['span']}, {c['order']}" for S, c in closest.items())])
    else:
        if doc.get("kv_block") is None:
            out.append(["KV tile Bc", "none: un-tiled (softmax over all the keys, then one P V matmul)"])
        else:
            out.append(["KV tile Bc", f"{doc['kv_block']} keys, walked {doc['kv_order']}"
                        + ("" if doc.get("structure_determined", True) else " (other structures also fit)")])
        if doc.get("accumulation"):
            out.append(["accumulation", doc["accumulation"]])
        arch = doc.get("architectures")
        if arch:
            out.append(["matrix unit (from the attention's bits)", f"{arch['answer']}; indistinguishable on these "
                        f"calls: {', '.join(arch['indistinguishable'])}"])
        out.append(["splits", ", ".join(f"S={S}: {n}" for S, n in doc["splits"].items())])
        for alt in doc.get("structure_alternatives") or []:
            out.append(["also reproduces", f"Bc={alt['kv_block']} {alt['kv_order']}, splits "
                        + ", ".join(f"S={S}: {len(r)}" for S, r in alt["split_bounds"].items())])
        out.append(["split ranges", "; ".join(f"S={S}: {r}" for S, r in doc["split_bounds"].items())])
        rules = doc.get("split_rules") or []
        out.append(["split rules that cut alike", ", ".join(r["rule"] + ("" if r["tile_matches"] else " (other tile)")
                                                           for r in rules) or "none of attnum.attention.serving.split_rules"])
        if doc.get("split_cuts"):
            out.append(["split cut", ", ".join(doc["split_cuts"])])
        merge = doc["merge"]
        out.append(["merge", merge if isinstance(merge, str) else "undetermined: " + ", ".join(merge["undetermined"])])
        for site, row in doc["sites"].items():
            alts = row["alternatives"]
            out.append([f"site {site}", row["format"] if row["determined"] else f"undetermined: {', '.join(alts)}"])
        out.append(["policy", doc["policy"]])
        out.append(["reproduction", doc["reproduction"]])
        for u in doc.get("undetermined") or []:
            alts = u["alternatives"]
            out.append([f"undetermined {u['choice']}", ", ".join(map(str, alts)) if isinstance(alts, list)
                        else f"{alts} structures"])
        if doc.get("resolve"):
            out.append(["to tell them apart", doc["resolve"]])
        out.append(["bit-exact on fresh inputs", f"{doc['bit_exact_fraction']:.6f} "
                    f"(largest residual {doc['residual_ulp']:g} ulp)"])
        for r in doc.get("fresh_checks") or []:
            if r["bit_exact_fraction"] < 1.0:
                out.append([f"  {r['inputs']}", f"{r['bit_exact_fraction']:.6f} bit-exact"])
        for line in doc.get("fresh_left_out") or []:
            out.append(["  not checked", line])
        if doc.get("unexplained"):
            out.append(["not explained", doc["unexplained"]])
    mma = doc["mma"]
    if not isinstance(mma, str):
        mma = f"{mma['identified']} ({mma['calls']} calls; classes the tiles tell apart: {', '.join(mma['classes'])})"
    out.append(["matrix unit (mma)", mma])
    out.append(["output dtype", doc.get("output_dtype")])
    for line in doc.get("skipped") or []:
        out.append(["skipped (memory)", line])
    out.append(["target calls", f"{doc['calls']} ({doc['target_seconds']:.1f} s in the target, "
                                f"{doc['seconds']:.1f} s in all; peak {doc.get('peak_rss_mib')} MiB resident, budget "
                                f"{doc.get('memory_budget_mib')} MiB)"])
    return out
