//! The demo's scripted models: what the travel desk and its research sub-agent "say" in each
//! turn, paced like a real model when asked.

use std::time::Duration;

use mull_providers::scripted::ScriptedModel;
use serde_json::json;

/// How long the model "thinks" before its first part, when paced.
const FIRST_TOKEN: Duration = Duration::from_millis(700);

/// The research sub-agent's script: one guide search, then the answer.
pub(super) fn research_script(part_delay: Duration, paced: bool) -> ScriptedModel {
    let think = |s: mull_providers::scripted::StepScript| {
        if paced {
            s.pause(FIRST_TOKEN)
        } else {
            s
        }
    };
    ScriptedModel::builder("scripted-research-1")
        .part_delay(part_delay)
        .by_conversation()
        .step(|s| {
            think(s)
                .text("Checking the tram guides.")
                .tool_call(
                    "call_search_r1",
                    "search_guides",
                    json!({"query": "tram from Alfama to Belém"}),
                )
                .usage(320, 26)
        })
        .step(|s| {
            think(s)
                .text_deltas(words(
                    "Take tram 15 from Praça da Figueira, a short walk down from Alfama: it \
                     runs along the river to Belém every ten minutes or so.",
                ))
                .usage(610, 38)
        })
        .build()
}

/// `text` as the deltas a model streams: a word (with its trailing space) each.
pub(super) fn words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = text.split_inclusive(' ').map(str::to_owned).collect();
    if out.is_empty() {
        out.push(String::new());
    }
    out
}

/// The model's script for the seven turns; `paced` adds the silences a real model leaves
/// (before its first token, and once mid-answer), which write no events.
///
/// Long because it is the script itself, turn by turn.
pub(super) fn script(part_delay: Duration, paced: bool) -> ScriptedModel {
    let think = |s: mull_providers::scripted::StepScript| {
        if paced {
            s.pause(FIRST_TOKEN)
        } else {
            s
        }
    };
    ScriptedModel::builder("scripted-travel-1")
        .part_delay(part_delay)
        // A session reopened with a fresh agent (a new process, a server that evicted it)
        // carries on with the turn its conversation has reached.
        .by_conversation()
        // Turn 1: a plain answer with reasoning.
        .step(|s| {
            think(s)
                .reasoning("The user wants a quick sense of Lisbon; no tool needed for that.")
                .text_deltas(words(
                    "Lisbon is a hilly, sunny city on the Tagus: yellow trams grinding up \
                     the slopes of Alfama, tiled façades in every colour, miradouros with \
                     the whole river below you, fado drifting out of small bars at night, \
                     and custard tarts still warm from the ovens in Belém.",
                ))
                .usage(412, 71)
        })
        // Turn 2: two tools in one step, then the answer with a citation.
        .step(|s| {
            think(s)
                .reasoning("Forecast first, and the guides for a walking plan.")
                .text("Checking the forecast and the guides.")
                .tool_call("call_weather_1", "weather", json!({"city": "Lisbon"}))
                .tool_call(
                    "call_search_1",
                    "search_guides",
                    json!({"query": "Lisbon weekend walk"}),
                )
                .usage(690, 74)
        })
        .step(|s| {
            think(s)
                .text_deltas(words(
                    "Friday is the sunny one (24 °C): walk Alfama in the morning, from the \
                     cathedral up to the castle walls, and come down through the alleys for \
                     lunch. Saturday turns cloudy, good for the tile museum and the \
                     riverside galleries; pack a jacket for Sunday's rain and spend it in \
                     the cafés of Chiado.",
                ))
                .source_url(
                    "src_1",
                    "https://guides.example/alfama",
                    Some("Alfama on foot"),
                )
                .usage(1184, 83)
        })
        // Turn 3: a slow tool, then the answer.
        .step(|s| {
            think(s)
                .tool_call(
                    "call_hotels_1",
                    "find_hotels",
                    json!({"city": "Lisbon", "near": "Alfama", "nights": 2}),
                )
                .usage(1290, 28)
        })
        .step(|s| {
            think(s)
                .text_deltas(words(
                    "Two good options near Alfama: Casa do Largo, a small guesthouse on a \
                     quiet square (from 140 € a night), and the Memmo Alfama, with a rooftop \
                     pool looking over the river (from 260 €). Both are a short walk from \
                     the tram 28 stops.",
                ))
                .usage(1388, 62)
        })
        // Turn 4: a call the policy blocks, then the explanation.
        .step(|s| {
            think(s)
                .tool_call(
                    "call_cancel_1",
                    "cancel_booking",
                    json!({"booking": "LIS-2291"}),
                )
                .usage(1420, 31)
        })
        .step(|s| {
            think(s)
                .text_deltas(words(
                    "I can't cancel bookings myself. Please confirm the cancellation of \
                     LIS-2291 in the app, and I will look for a new stay once it is done.",
                ))
                .usage(1502, 34)
        })
        // Turn 5: a long answer with a pause in the middle, as a busy model leaves.
        .step(|s| {
            let s = think(s).text_deltas(words(
                "For a rainy Sunday, pack a light waterproof jacket, shoes with some grip \
                 (the cobbles get slippery), and a small umbrella. ",
            ));
            let s = if paced {
                s.pause(Duration::from_millis(1600))
            } else {
                s
            };
            s.text_deltas(words(
                "Keep a tote for the market at Campo de Ourique, a charger for the long \
                 photo days, and leave room in the bag for a tin of sardines and a box of \
                 pastéis to take home.",
            ))
            .usage(1580, 66)
        })
        // Turn 6: a question for the research sub-agent, then the answer built on its reply.
        .step(|s| {
            think(s)
                .tool_call(
                    "call_research_1",
                    "research",
                    json!({"prompt": "How do I get from Alfama to Belém by tram?"}),
                )
                .usage(1660, 29)
        })
        .step(|s| {
            think(s)
                .text_deltas(words(
                    "My researcher says: take tram 15 from Praça da Figueira, along the river \
                     to Belém — every ten minutes or so. Go early for the pastéis.",
                ))
                .usage(1750, 41)
        })
        // Turn 7: a booking that waits for approval, then the confirmation.
        .step(|s| {
            think(s)
                .text("Booking it; you will be asked to approve.")
                .tool_call(
                    "call_book_1",
                    "book_hotel",
                    json!({"hotel": "Casa do Largo", "nights": 2}),
                )
                .usage(1650, 30)
        })
        .step(|s| {
            think(s)
                .text_deltas(words(
                    "Booked: Casa do Largo for two nights, reference LIS-3107.",
                ))
                .usage(1720, 22)
        })
        .build()
}
