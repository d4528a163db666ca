"""TFX ExampleGen for raw Criteo/Avazu text files (component.py; the
package itself imports nothing, so its span and pattern checks load no
TFX)."""
