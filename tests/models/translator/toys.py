"""The translator tests' toys: a parallel corpus of short English-Spanish pairs (the jobs' tests train on it), the
Spanish sentences the exports' tests translate, the translator's additions to the export contract's bad-input battery
and its check of the empty-like rows, and a JSON POST for the served exports."""
from tests.serving.client import http

PAIRS = [("I am here.", "Estoy aquí."), ("You are here.", "Estás aquí."), ("He is here.", "Él está aquí."),
         ("I am tired.", "Estoy cansado."), ("You are tired.", "Estás cansado."), ("He is tired.", "Él está cansado."),
         ("I am happy.", "Estoy feliz."), ("You are happy.", "Estás feliz."), ("He is happy.", "Él está feliz."),
         ("I am hungry.", "Tengo hambre."), ("Be brief.", "Sé breve."), ("Go away.", "Vete."),
         ("I see.", "Ya veo."), ("Come in.", "Pasa."), ("Thanks.", "Gracias."), ("Hello!", "¡Hola!")]
SENTENCES = ["Hace mucho frío aquí.", "¿Puedo tomar prestado este libro?", "Esta es mi vida.",
             "¿Todavía están en casa?", "Trata de averiguarlo."]
EMPTY_LIKE = ["", "   \t\n ", "\x00"]
# Family-specific additions to the contract's bad-input battery.
EXTRA_BAD = {"control": "\x00", "punctuation": "¿?!", "special_like": "[UNK] [END] [START]"}


def empty_like_rows_are_empty(texts, outputs):
    for i, text in enumerate(texts):
        if text in EMPTY_LIKE:
            assert outputs["translation"][i] == b""
            assert outputs.get("score", [0.0] * len(texts))[i] == 0.0
            assert outputs.get("target_length", [0] * len(texts))[i] == 0


def post(url, payload):
    """POST ``payload`` as JSON: ``(status, decoded JSON body)``, error statuses included (120 s: a cold export's
    first beam searches)."""
    return http("POST", url, payload, timeout=120)
