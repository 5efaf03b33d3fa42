"""Generate testing/data/recall_conversation.json deterministically: a long chat with persona
facts spread over many turns (between small-talk turns), and paraphrased questions whose known
answer is the turn that stated the fact. Used by `memoryplus bench` for recall@10.

    python -m memoryplus.testing.make_recall_data      # rewrites the file (same content every time)
"""
from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).parent / "data" / "recall_conversation.json"
NAMES = """Priya Tomasz Ingrid Kwame Lucia Rafael Mei Oskar Fatima Henrik Amara Dmitri Sofia Jonas
Yuki Mateo Leila Pavel Nadia Emeka Clara Bjorn Aisha Marco Hana Tobias Zara Felix Ines Kenji
Olga Samir Greta Diego Noor Lars Elena Kofi Rosa Anton Mira Hugo Selin Viktor Lena Omar Petra
Luca Daria Milan Keiko Ruben Alma Stefan Ayla Nico Vera Imre Talia Bruno Freya Ravi Ottilie Joao
Maren Idris Carmen Wanjiru Aurelio Signe Tariq Bettina Ciaran Eliska Farid Gianna Hamish Ilse
Jasper Katya Lorenzo Magda""".split()
RELS = ["sister", "brother", "cousin", "neighbour", "colleague", "friend", "aunt", "uncle",
        "flatmate", "boss", "niece", "nephew", "godmother", "classmate", "landlord"]
CITIES = ["Leeds", "Porto", "Gdansk", "Tallinn", "Valencia", "Bergen", "Nairobi", "Osaka", "Quito",
          "Krakow", "Ghent", "Bologna", "Halifax", "Cork", "Lyon", "Tampere", "Brno", "Seville",
          "Dundee", "Utrecht", "Graz", "Aarhus", "Bilbao", "Turin", "Malmo"]
JOBS = ["veterinarian", "pastry chef", "air traffic controller", "pharmacist", "carpenter",
        "translator", "radiologist", "firefighter", "architect", "beekeeper", "tax auditor",
        "marine biologist", "piano tuner", "locksmith", "midwife", "geologist", "sommelier",
        "bus driver", "librarian", "dentist", "welder", "florist", "actuary", "zookeeper"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
ALLERGIES = ["peanuts", "shellfish", "cat hair", "penicillin", "pollen", "sesame", "latex",
             "bee stings", "gluten", "kiwi fruit", "dust mites", "mustard"]
SPORTS = ["badminton", "water polo", "rock climbing", "fencing", "curling", "table tennis",
          "rowing", "handball", "cricket", "judo", "lacrosse", "squash", "archery", "surfing"]
CARS = ["Skoda Octavia", "Volvo estate", "Fiat Panda", "Toyota Prius", "Mini Cooper",
        "Tesla Model 3", "Renault Clio", "Subaru Outback", "Land Rover Defender", "VW campervan"]
COLORS = ["red", "silver", "dark green", "white", "yellow", "navy blue", "orange", "black"]
PETS = ["a parrot", "two rabbits", "a tortoise", "a greyhound", "three goldfish", "a ferret",
        "a Maine Coon cat", "a hedgehog", "a corgi", "a chameleon"]

TEMPLATES = [  # (statement, paraphrased question)
    ("My {rel} {name} lives in {city} now.", "In which town is {name} based these days?", "city"),
    ("{name}, my {rel}, works as a {job}.", "What does {name} do for a living?", "job"),
    ("My {rel} {name} has a birthday on {day} {month}.", "When should I congratulate {name} each year?", "date"),
    ("{name} (my {rel}) is allergic to {allergy}.", "What must {name} avoid for health reasons?", "allergy"),
    ("My {rel} {name} plays {sport} every weekend.", "Which sport keeps {name} busy on Saturdays and Sundays?", "sport"),
    ("{name} drives a {color} {car}.", "What vehicle does {name} own?", "car"),
    ("My {rel} {name} keeps {pet} at home.", "Does {name} have any animals in the house?", "pet"),
]
FILLER = [
    ("Can you suggest something quick for dinner tonight?", "How about a vegetable stir-fry with rice?"),
    ("What's a good way to stay focused while working from home?", "Try time-boxing with short breaks."),
    ("Tell me a fun fact about octopuses.", "They have three hearts and blue blood."),
    ("How do I remove a coffee stain from a shirt?", "Rinse with cold water, then use a little detergent."),
    ("Any tips for sleeping better?", "Keep a regular schedule and avoid screens late at night."),
    ("What's the difference between weather and climate?", "Weather is short-term, climate is long-term averages."),
    ("Recommend a board game for four players.", "Ticket to Ride works well for four."),
    ("How long should I boil an egg for a runny yolk?", "About six minutes from boiling water."),
    ("Explain compound interest simply.", "You earn interest on your interest as well as the principal."),
    ("Give me a short stretching routine.", "Neck rolls, shoulder circles, hamstring and calf stretches."),
    ("What's a polite way to decline a meeting?", "Thank them, say you can't attend, offer an alternative."),
    ("How do plants know which way is up?", "Gravity-sensing cells guide roots down and shoots up."),
]


def build(seed: int = 7, facts_per_name: int = 4) -> dict:
    rng = random.Random(seed)
    facts = []
    for n, name in enumerate(NAMES):
        rel = RELS[n % len(RELS)]
        for template in rng.sample(TEMPLATES, facts_per_name):
            values = dict(name=name, rel=rel, city=rng.choice(CITIES), job=rng.choice(JOBS),
                          day=rng.randint(1, 28), month=rng.choice(MONTHS),
                          allergy=rng.choice(ALLERGIES), sport=rng.choice(SPORTS),
                          car=rng.choice(CARS), color=rng.choice(COLORS), pet=rng.choice(PETS))
            facts.append((template[0].format(**values), template[1].format(**values)))
    rng.shuffle(facts)
    turns, questions = [], []
    f = 0
    acks = ["Got it, thanks for telling me.", "Noted!", "Good to know.", "Thanks, I'll keep that in mind."]
    while f < len(facts):
        if rng.random() < 0.32:
            user, answer = rng.choice(FILLER)
        else:
            user, answer = facts[f][0], rng.choice(acks)
            questions.append([facts[f][1], f"t{len(turns) + 1:04d}"])
            f += 1
        turns.append([f"t{len(turns) + 1:04d}", user, answer])
    return {"about": "Generated by testing/make_recall_data.py (seed %d): persona facts across many "
                     "turns; each question's answer is the id of the turn that stated it." % seed,
            "turns": turns, "questions": questions}


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    data = build()
    OUT.write_text(json.dumps(data, indent=0) + "\n", encoding="utf-8")
    print(f"{OUT}: {len(data['turns'])} turns, {len(data['questions'])} questions")


if __name__ == "__main__":
    main()
