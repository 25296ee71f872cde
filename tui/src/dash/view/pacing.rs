//! The turn's pacing pane: its totals, sparklines of tokens per step and chunks per moment,
//! and the chunk-gap timeline — every chunk plotted at its time by the silence before it,
//! stalls in red, tool runs along the bottom, the first chunk marked — where a slow turn shows
//! whether the model, a tool or something else kept it waiting.

use mull_store::pacing::{TurnPacing, STALL_MS};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Dataset, GraphType, Paragraph, Sparkline};
use ratatui::Frame;

use crate::dash::app::{App, TurnView};
use crate::dash::view::{fmt_duration, fmt_tokens, status_style};

/// Width of a sparkline's label.
const LABEL: u16 = 12;

/// Draws the pacing pane in `block`.
pub fn render(frame: &mut Frame, area: Rect, app: &App, turn: &TurnView, block: Block) {
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let summary_line = summary_line(&turn.pacing);
    // The summary wraps between its phrases rather than lose the last one off the edge.
    let summary_height = if summary_line.width() > usize::from(inner.width) {
        2
    } else {
        1
    };
    let [totals, summary, spark_steps, spark_chunks, chart] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(summary_height),
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(0),
    ])
    .areas(inner);
    render_totals(frame, totals, app, turn);
    let pacing = &turn.pacing;
    frame.render_widget(
        Paragraph::new(summary_line).wrap(ratatui::widgets::Wrap { trim: true }),
        summary,
    );
    let steps: Vec<u64> = pacing.steps.iter().map(|s| s.output).collect();
    sparkline(
        frame,
        spark_steps,
        "tokens/step",
        &steps,
        Style::new().fg(Color::Green),
    );
    let width = usize::from(spark_chunks.width.saturating_sub(LABEL)).max(1);
    sparkline(
        frame,
        spark_chunks,
        "chunk rate",
        &chunk_rate(pacing, width),
        Style::new().fg(Color::Cyan),
    );
    if chart.height >= 4 {
        render_gap_chart(frame, chart, pacing);
    }
}

fn render_totals(frame: &mut Frame, area: Rect, app: &App, turn: &TurnView) {
    let lines = match app.open_turn() {
        Some(summary) => vec![
            Line::from(vec![
                Span::styled(summary.status.as_str(), status_style(summary.status)),
                Span::raw(format!(
                    " · {} step{} · {} · {} tool call{}",
                    summary.steps,
                    if summary.steps == 1 { "" } else { "s" },
                    summary
                        .duration_ms
                        .map(fmt_duration)
                        .unwrap_or_else(|| "…".into()),
                    summary.tools.calls,
                    if summary.tools.calls == 1 { "" } else { "s" },
                )),
            ]),
            Line::from(format!(
                "tokens in {} · out {} · cached {}",
                fmt_tokens(summary.usage.input_tokens),
                fmt_tokens(summary.usage.output_tokens),
                fmt_tokens(summary.usage.cached_input_tokens)
            )),
        ],
        None => vec![Line::from(turn.turn_id.clone())],
    };
    frame.render_widget(Paragraph::new(lines), area);
}

/// "1st chunk 0.41s · longest gap 2.30s · 1 stall · model 2.10s · tools 700ms".
fn summary_line(pacing: &TurnPacing) -> Line<'static> {
    let dim = Style::new().fg(Color::DarkGray);
    let mut spans = vec![
        Span::styled("1st chunk ", dim),
        Span::raw(
            pacing
                .first_chunk_ms
                .map(fmt_duration)
                .unwrap_or_else(|| "…".into()),
        ),
    ];
    if let Some(gap) = pacing.longest_gap() {
        spans.push(Span::styled(" · longest gap ", dim));
        spans.push(Span::raw(fmt_duration(gap.gap_ms)));
    }
    let stalls = pacing.stalls().count();
    if stalls > 0 {
        spans.push(Span::styled(
            format!(" · {stalls} stall{}", if stalls == 1 { "" } else { "s" }),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ));
    }
    spans.push(Span::styled(" · model ", dim));
    spans.push(Span::raw(fmt_duration(pacing.model_ms())));
    spans.push(Span::styled(" · tools ", dim));
    spans.push(Span::styled(
        fmt_duration(pacing.tool_ms()),
        Style::new().fg(Color::Yellow),
    ));
    Line::from(spans)
}

fn sparkline(frame: &mut Frame, area: Rect, label: &str, data: &[u64], style: Style) {
    let [label_area, spark] =
        Layout::horizontal([Constraint::Length(LABEL), Constraint::Min(1)]).areas(area);
    frame.render_widget(
        Paragraph::new(Span::styled(
            label.to_owned(),
            Style::new().fg(Color::DarkGray),
        )),
        label_area,
    );
    // The newest values when there are more than cells.
    let shown = &data[data.len().saturating_sub(usize::from(spark.width))..];
    frame.render_widget(Sparkline::default().data(shown).style(style), spark);
}

/// Chunks per slice of the turn, `buckets` slices from its start to its last event.
fn chunk_rate(pacing: &TurnPacing, buckets: usize) -> Vec<u64> {
    let span = pacing.last_ms.max(1);
    let mut counts = vec![0u64; buckets];
    for chunk in &pacing.chunks {
        let i = ((chunk.at_ms as u128 * buckets as u128) / (span as u128 + 1)) as usize;
        if let Some(c) = counts.get_mut(i.min(buckets - 1)) {
            *c += 1;
        }
    }
    counts
}

/// The chunk-gap timeline: x is seconds into the turn, y the silence before each chunk.
fn render_gap_chart(frame: &mut Frame, area: Rect, pacing: &TurnPacing) {
    let secs = (pacing.last_ms.max(1) as f64) / 1000.0;
    let max_gap = pacing.longest_gap().map(|g| g.gap_ms).unwrap_or(0).max(100) as f64;
    // At most two points per cell column: the longest gap of each slice.
    let slices = usize::from(area.width).max(1) * 2;
    let mut gaps: Vec<Option<(f64, f64)>> = vec![None; slices];
    for chunk in &pacing.chunks {
        let x = chunk.at_ms as f64 / 1000.0;
        let i = (((x / secs) * (slices - 1) as f64) as usize).min(slices - 1);
        let y = chunk.gap_ms as f64;
        if gaps[i].is_none_or(|(_, old)| y > old) {
            gaps[i] = Some((x, y));
        }
    }
    let gaps: Vec<(f64, f64)> = gaps.into_iter().flatten().collect();
    let stalls: Vec<(f64, f64)> = pacing
        .stalls()
        .map(|c| (c.at_ms as f64 / 1000.0, c.gap_ms as f64))
        .collect();
    let step = secs / slices as f64;
    let tools: Vec<(f64, f64)> = pacing
        .tools
        .iter()
        .flat_map(|span| {
            let (a, b) = (span.start_ms as f64 / 1000.0, span.end_ms as f64 / 1000.0);
            let n = ((b - a) / step).ceil().max(1.0) as usize;
            (0..=n).map(move |k| (a + (b - a) * k as f64 / n as f64, 0.0))
        })
        .collect();
    let first: Vec<(f64, f64)> = pacing
        .first_chunk_ms
        .map(|ms| {
            let x = ms as f64 / 1000.0;
            vec![(x, 0.0), (x, max_gap)]
        })
        .unwrap_or_default();
    let datasets = vec![
        Dataset::default()
            .name("tool")
            .marker(Marker::Block)
            .graph_type(GraphType::Scatter)
            .style(Style::new().fg(Color::Yellow))
            .data(&tools),
        Dataset::default()
            .name("1st chunk")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(Color::Green))
            .data(&first),
        Dataset::default()
            .name("gap")
            .marker(Marker::Braille)
            .graph_type(GraphType::Scatter)
            .style(Style::new().fg(Color::Cyan))
            .data(&gaps),
        Dataset::default()
            .name(format!("stall ≥{}", fmt_duration(STALL_MS)))
            .marker(Marker::Dot)
            .graph_type(GraphType::Scatter)
            .style(Style::new().fg(Color::Red).add_modifier(Modifier::BOLD))
            .data(&stalls),
    ];
    let chart = Chart::new(datasets)
        .block(Block::new().title(Line::styled(
            "chunk gaps (ms) over the turn (s)",
            Style::new().fg(Color::DarkGray),
        )))
        .x_axis(
            Axis::default()
                .bounds([0.0, secs])
                .labels([
                    "0".to_owned(),
                    format!("{:.1}", secs / 2.0),
                    format!("{secs:.1}"),
                ])
                .style(Style::new().fg(Color::DarkGray)),
        )
        .y_axis(
            Axis::default()
                .bounds([0.0, max_gap])
                .labels(["0".to_owned(), format!("{max_gap:.0}")])
                .style(Style::new().fg(Color::DarkGray)),
        )
        .hidden_legend_constraints((Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)));
    frame.render_widget(chart, area);
}
