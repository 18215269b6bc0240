//! Draws the charts of a saved run again: `cargo run --release -p uipc-bench --example
//! charts_from_json -- RUN.json RUN.txt OUT_DIR`, where RUN.json is what `uipc bench --json`
//! wrote and RUN.txt the tables it printed (the JSON has no units or row headers: they are read
//! from each table's header line, `keys  uipc (µs total)  ...`).

use std::collections::BTreeMap;
use uipc_bench::report::{Row, Table};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [json, txt, out] = args.as_slice() else {
        return Err("usage: charts_from_json RUN.json RUN.txt OUT_DIR".into());
    };
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).map_err(|e| format!("{json}: {e}"))?)
            .map_err(|e| e.to_string())?;
    let text = std::fs::read_to_string(txt).map_err(|e| format!("{txt}: {e}"))?;
    // Title line -> (row header, unit), from the line after each title.
    let lines: Vec<&str> = text.lines().collect();
    let mut heads = BTreeMap::new();
    for w in lines.windows(2) {
        let header = w[1];
        if let (Some(open), Some(close)) = (header.find(" ("), header.find(')')) {
            let before = header[..open].trim();
            let param_name = before
                .rsplit_once("  ")
                .map_or(before, |(p, _)| p)
                .trim()
                .to_string();
            let unit = header[open + 2..close].to_string();
            heads.insert(w[0].trim().to_string(), (param_name, unit));
        }
    }
    let mut tables: Vec<(String, Table)> = Vec::new();
    for r in doc["rows"].as_array().ok_or("no rows")? {
        let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
        let (scenario, title) = (s("scenario"), s("table"));
        let i = match tables
            .iter()
            .position(|(sc, t)| *sc == scenario && t.title == title)
        {
            Some(i) => i,
            None => {
                let (param_name, unit) = heads.get(&title).cloned().unwrap_or_default();
                tables.push((
                    scenario.clone(),
                    Table::new(&title, &param_name, &unit, &[]),
                ));
                tables.len() - 1
            }
        };
        let t = &mut tables[i].1;
        let (param, implementation) = (s("param"), s("impl"));
        if !t.params.contains(&param) {
            t.params.push(param.clone());
        }
        if !t.columns.contains(&implementation) {
            t.columns.push(implementation.clone());
        }
        t.rows.push(Row {
            table: title,
            param,
            implementation,
            micros: r["micros"].as_f64().unwrap_or(0.0),
            stddev_micros: r["stddev_micros"].as_f64().unwrap_or(0.0),
            runs: r["runs"].as_u64().unwrap_or(1) as usize,
            samples_micros: r["samples_micros"]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_f64()).collect())
                .unwrap_or_default(),
            note: None,
        });
    }
    for (scenario, t) in &tables {
        let stem = uipc_bench::chart::file_stem(scenario, &t.title);
        uipc_bench::chart::draw(t, std::path::Path::new(out), &stem)?;
        println!("{stem}.svg");
    }
    Ok(())
}
